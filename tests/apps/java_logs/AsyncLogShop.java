// A service that logs through log4j2's async loggers (the LMAX disruptor's ring buffer) to a
// destination slower than the requests produce, as the case study's log server was:
//   java -Dlog4j2.contextSelector=org.apache.logging.log4j.core.async.AsyncLoggerContextSelector
//        -Dlog4j2.asyncLoggerRingBufferSize=128 -Dlog4j2.configurationFile=log4j2-async.xml
//        AsyncLogShop PORT
// Every request logs LINES events; the log destination takes WRITE_US per event, so the
// consumer writes at most 1e6/WRITE_US events a second. Under more load than that the ring
// buffer fills and, with log4j2's default policy, request threads block in the enqueue path;
// with -Dlog4j2.asyncQueueFullPolicy=Discard the events are dropped instead and nobody waits.

import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import java.util.concurrent.locks.LockSupport;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

public class AsyncLogShop {
    static final int LINES = 10;
    static final long WRITE_US = 200;

    /// The slow log destination: each write takes WRITE_US, and the bytes go nowhere.
    static final class SlowSink extends OutputStream {
        @Override
        public void write(int b) {}

        @Override
        public void write(byte[] b, int off, int len) {
            LockSupport.parkNanos(WRITE_US * 1000);
        }
    }

    public static void main(String[] args) throws Exception {
        // before log4j2 starts: its console appender (follow="true") writes to this stream
        System.setOut(new PrintStream(new SlowSink(), true));
        Logger log = LogManager.getLogger(AsyncLogShop.class);
        int port = Integer.parseInt(args[0]);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 128);
        server.setExecutor(Executors.newFixedThreadPool(8, r -> {
            Thread t = new Thread(r);
            t.setName("request-" + t.getId());
            return t;
        }));
        server.createContext("/", exchange -> {
            for (int line = 0; line < LINES; line++) {
                log.info("order {} line {} priced", exchange.hashCode(), line);
            }
            byte[] body = "ok\n".getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
        System.err.println("listening on 127.0.0.1:" + port);
    }
}
