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
//
// With `--oplog-max=N` the oplog is kept to about its N latest entries, as a
// replica set keeps a capped oplog (mongo-java-server's own only grows, and
// every change-stream getMore scans all of it: see docs/operations/scaling.md).
// What a capped oplog means is kept too: a change stream opened or resumed from
// a point older than the entries dropped, or a cursor that fell that far
// behind, fails with ChangeStreamHistoryLost (code 286) instead of silently
// skipping, and entries an open change-stream cursor has not read yet are not
// dropped (a cursor not read for CURSOR_IDLE_MS stops holding them). A `count`
// of `local.oplog.rs` answers how many entries were ever appended, so it only
// grows (the watcher's idle probe relies on that).
import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.exception.MongoServerError;
import de.bwaldvogel.mongo.oplog.OplogPosition;
import de.bwaldvogel.mongo.wire.message.MongoMessage;
import de.bwaldvogel.mongo.wire.message.MongoQuery;
import io.netty.channel.Channel;
import java.time.Clock;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

public class MongoServerMain {
    public static void main(String[] args) throws Exception {
        List<String> positional = new ArrayList<>();
        long oplogMax = 0;
        for (String arg : args) {
            if (arg.startsWith("--oplog-max=")) {
                oplogMax = Long.parseLong(arg.substring("--oplog-max=".length()));
            } else {
                positional.add(arg);
            }
        }
        if (positional.size() < 2) {
            System.err.println("usage: MongoServerMain <host> <port> [<h2-file>] [--oplog-max=N]");
            System.exit(2);
        }
        args = positional.toArray(new String[0]);
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
        OperationTimeBackend backend = new OperationTimeBackend(inner, oplogMax);
        MongoServer server = new MongoServer(backend);
        server.enableOplog();
        server.bind(host, port);
        ScheduledExecutorService trimmer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "oplog-trimmer");
            t.setDaemon(true);
            return t;
        });
        if (oplogMax > 0) {
            trimmer.scheduleWithFixedDelay(backend::trimOplog, 200, 200, TimeUnit.MILLISECONDS);
        }
        System.out.println("mongo-java-server listening on " + host + ":" + port
                + (args.length > 2 ? " (h2 file " + args[2] + ")" : " (in memory)")
                + (oplogMax > 0 ? " (oplog capped at about " + oplogMax + " entries)" : ""));
        System.out.flush();
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.shutdownNow();
            done.countDown();
        }));
        done.await();
    }
}

/**
 * Delegates everything; adds `operationTime` to change-stream aggregate replies, and
 * keeps the oplog capped when asked (see the top of this file).
 */
class OperationTimeBackend implements MongoBackend {
    /** A change-stream cursor not read for this long stops holding oplog entries. */
    static final long CURSOR_IDLE_MS = 120_000;
    static final int HISTORY_LOST = 286;

    private final MongoBackend inner;
    private final long oplogMax;
    /** Entries dropped so far (a `count` of the oplog adds them). */
    private volatile long trimmed = 0;
    /** The newest entry dropped: a stream needing anything after an older point is lost. */
    private volatile BsonTimestamp lastDropped = null;

    /** Where an open change-stream cursor is (what it read last), and when it last read. */
    private record Reader(OplogPosition position, BsonTimestamp at, long readMs) {}

    private final Map<Long, Reader> readers = new ConcurrentHashMap<>();

    OperationTimeBackend(MongoBackend inner, long oplogMax) {
        this.inner = inner;
        this.oplogMax = oplogMax;
    }

    private MongoCollection<?> oplog() {
        return inner.resolveDatabase("local").resolveCollection("oplog.rs", false);
    }

    /** Drop the oldest entries beyond `oplogMax` that no live change-stream cursor needs. */
    synchronized void trimOplog() {
        try {
            MongoCollection<?> oplog = oplog();
            if (oplog == null) {
                return;
            }
            int count = oplog.count();
            if (count <= oplogMax + Math.max(1, oplogMax / 10)) {
                return;  // trim in batches of a tenth, not one entry at a time
            }
            List<BsonTimestamp> times = new ArrayList<>(count);
            oplog.queryAllAsStream().forEach(d -> {
                if (d.get("ts") instanceof BsonTimestamp ts) {
                    times.add(ts);
                }
            });
            times.sort(null);
            int drop = (int) Math.max(0, times.size() - oplogMax);
            long now = System.currentTimeMillis();
            for (Reader r : readers.values()) {  // keep what a live cursor has not read
                if (now - r.readMs() > CURSOR_IDLE_MS) {
                    continue;  // abandoned, or idle that long: it may lose its place
                }
                while (drop > 0 && times.get(drop - 1).compareTo(r.at()) > 0) {
                    drop--;
                }
            }
            if (drop == 0) {
                return;
            }
            BsonTimestamp cutoff = times.get(drop - 1);
            int deleted = oplog.deleteDocuments(
                    new Document("ts", new Document("$lte", cutoff)), 0);
            lastDropped = cutoff;
            trimmed += deleted;
        } catch (RuntimeException e) {
            System.err.println("oplog trim failed: " + e);
        }
    }

    private static BsonTimestamp timestampOf(OplogPosition position) {
        return new BsonTimestamp(Long.parseUnsignedLong(position.toHexString(), 16));
    }

    private boolean lost(BsonTimestamp after) {
        BsonTimestamp dropped = lastDropped;
        return dropped != null && dropped.compareTo(after) > 0;
    }

    private static MongoServerError historyLost(String what) {
        return new MongoServerError(HISTORY_LOST, "ChangeStreamHistoryLost",
                what + ": the oplog entries it needs were dropped (capped oplog)");
    }

    /** The point a change stream opens at (its token's, or now), if it is one. */
    private BsonTimestamp openedAt(Document spec, BsonTimestamp now) {
        for (String key : List.of("resumeAfter", "startAfter")) {
            if (spec.get(key) instanceof Document token) {
                return timestampOf(OplogPosition.fromDocument(token));
            }
        }
        if (spec.get("startAtOperationTime") instanceof BsonTimestamp at) {
            return new BsonTimestamp(Math.max(0, at.getValue() - 1));
        }
        return now;
    }

    private void noteRead(long cursorId, Document reply, String batchKey, BsonTimestamp from) {
        if (cursorIdOf(reply) == 0) {  // exhausted or closed
            readers.remove(cursorId);
            return;
        }
        BsonTimestamp at = from;
        OplogPosition position = null;
        if (reply.get("cursor") instanceof Document cursor
                && cursor.get(batchKey) instanceof List<?> batch && !batch.isEmpty()
                && batch.get(batch.size() - 1) instanceof Document last
                && last.get("_id") instanceof Document token) {
            position = OplogPosition.fromDocument(token);
            at = timestampOf(position);
        }
        readers.put(cursorId, new Reader(position, at, System.currentTimeMillis()));
    }

    private static long cursorIdOf(Document reply) {
        if (reply.get("cursor") instanceof Document cursor && cursor.get("id") instanceof Number id) {
            return id.longValue();
        }
        return 0;
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
        boolean stream = opensChangeStream(command, query);
        BsonTimestamp from = null;
        if (oplogMax > 0 && stream) {
            Document spec = (Document) ((Document) ((List<?>) query.get("pipeline")).get(0))
                    .get("$changeStream");
            from = openedAt(spec, before);
            BsonTimestamp dropped = lastDropped;
            if (from == before) {  // a fresh stream starts now: after all that was dropped
                if (dropped != null && dropped.compareTo(from) > 0) {
                    from = dropped;
                }
            } else if (lost(from)) {
                throw historyLost("this change stream's resume point is older than the oplog");
            }
        }
        Reader reader = null;
        if (oplogMax > 0 && "getMore".equals(command) && query.get("getMore") instanceof Number id) {
            reader = readers.get(id.longValue());
            if (reader != null && lost(reader.at())) {
                readers.remove(id.longValue());
                inner.closeCursors(List.of(id.longValue()));
                throw historyLost("this change stream fell behind the oplog");
            }
        }
        if (oplogMax > 0 && "count".equals(command) && "local".equals(database)
                && "oplog.rs".equals(query.get("count"))) {
            synchronized (this) {  // not between a trim's delete and its tally
                Document counted = inner.handleCommand(channel, database, command, query);
                if (counted != null && counted.get("n") instanceof Number n) {
                    counted.put("n", n.longValue() + trimmed);
                }
                return counted;
            }
        }
        Document reply = inner.handleCommand(channel, database, command, query);
        if (reply != null && stream && !reply.containsKey("operationTime")) {
            reply.put("operationTime", before);
        }
        if (reply != null && oplogMax > 0) {
            if (stream) {
                noteRead(cursorIdOf(reply), reply, "firstBatch", from);
            } else if (reader != null) {
                noteRead(((Number) query.get("getMore")).longValue(), reply, "nextBatch", reader.at());
            } else if ("killCursors".equals(command) && query.get("cursors") instanceof List<?> ids) {
                ids.forEach(i -> readers.remove(((Number) i).longValue()));
            }
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
    @Override public void closeCursors(List<Long> cursorIds) {
        cursorIds.forEach(readers::remove);
        inner.closeCursors(cursorIds);
    }
    @Override public Clock getClock() { return inner.getClock(); }
    @Override public void enableOplog() { inner.enableOplog(); }
    @Override public void disableOplog() { inner.disableOplog(); }
    @Override public MongoDatabase resolveDatabase(String database) { return inner.resolveDatabase(database); }
    @Override public MongoBackend version(MongoVersion version) { inner.version(version); return this; }
}
