// Starts mongo-java-server (a MongoDB wire-protocol server) with its oplog
// enabled, so change streams work. Run with the Java 17 single-file launcher:
//   java -cp <classpath> MongoServerMain.java <host> <port> [<h2-file>]
// Without a file the data lives in memory (tests); with one it is kept in an
// H2 MVStore file and survives a restart (make run).
//
// Two gaps between mongo-java-server and what the current pymongo expects are
// closed here, in the launcher, so that the application code is exactly what
// runs against a real MongoDB replica set:
//  - the server reports wire version 8 at most; pymongo needs 9 (MongoDB 4.4);
//  - a change stream's aggregate reply has no `operationTime`, which pymongo
//    requires when a stream is opened without a resume token. We add one taken
//    just before the stream opened (seconds, increment 0), so a resume from it
//    may repeat events of that second but never skips one.
import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.wire.message.MongoMessage;
import de.bwaldvogel.mongo.wire.message.MongoQuery;
import io.netty.channel.Channel;
import java.time.Clock;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.CountDownLatch;

public class MongoServerMain {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: MongoServerMain <host> <port> [<h2-file>]");
            System.exit(2);
        }
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        MongoBackend inner = args.length > 2 ? new H2Backend(args[2]) : new MemoryBackend();
        inner.version(new MongoVersion() {
            @Override
            public List<Integer> getVersionArray() {
                return List.of(4, 4, 0);
            }

            @Override
            public int getWireVersion() {
                return 9;
            }
        });
        MongoServer server = new MongoServer(new OperationTimeBackend(inner));
        server.enableOplog();
        server.bind(host, port);
        System.out.println("mongo-java-server listening on " + host + ":" + port
                + (args.length > 2 ? " (h2 file " + args[2] + ")" : " (in memory)"));
        System.out.flush();
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.shutdownNow();
            done.countDown();
        }));
        done.await();
    }
}

/** Delegates everything; adds `operationTime` to change-stream aggregate replies. */
class OperationTimeBackend implements MongoBackend {
    private final MongoBackend inner;

    OperationTimeBackend(MongoBackend inner) {
        this.inner = inner;
    }

    private static boolean opensChangeStream(String command, Document query) {
        if (!"aggregate".equals(command)) {
            return false;
        }
        Object pipeline = query.get("pipeline");
        if (!(pipeline instanceof List<?> stages) || stages.isEmpty()) {
            return false;
        }
        return stages.get(0) instanceof Document first && first.containsKey("$changeStream");
    }

    @Override
    public Document handleCommand(Channel channel, String database, String command, Document query) {
        BsonTimestamp before = new BsonTimestamp(inner.getClock().instant(), 0);
        Document reply = inner.handleCommand(channel, database, command, query);
        if (reply != null && opensChangeStream(command, query) && !reply.containsKey("operationTime")) {
            reply.put("operationTime", before);
        }
        return reply;
    }

    @Override
    public Document handleMessage(MongoMessage message) {
        Document query = message.getDocument();
        String command = query.keySet().iterator().next();
        return handleCommand(message.getChannel(), message.getDatabaseName(), command, query);
    }

    @Override public void handleClose(Channel channel) { inner.handleClose(channel); }
    @Override public QueryResult handleQuery(MongoQuery query) { return inner.handleQuery(query); }
    @Override public void dropDatabase(String database) { inner.dropDatabase(database); }
    @Override public Collection<Document> getCurrentOperations(MongoQuery query) { return inner.getCurrentOperations(query); }
    @Override public Document getServerStatus() { return inner.getServerStatus(); }
    @Override public void close() { inner.close(); }
    @Override public void closeCursors(List<Long> cursorIds) { inner.closeCursors(cursorIds); }
    @Override public Clock getClock() { return inner.getClock(); }
    @Override public void enableOplog() { inner.enableOplog(); }
    @Override public void disableOplog() { inner.disableOplog(); }
    @Override public MongoDatabase resolveDatabase(String database) { return inner.resolveDatabase(database); }
    @Override public MongoBackend version(MongoVersion version) { inner.version(version); return this; }
}
