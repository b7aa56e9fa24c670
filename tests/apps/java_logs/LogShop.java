// A small HTTP service with two problems planted from the case studies, and their fixes:
//   java LogShop PORT planted   each request looks a price up by throwing and catching an
//                               exception for "not cached" (exceptions for control flow), and
//                               logs through log4j2 with the caller's location (%L %M,
//                               includeLocation="true"): log4j2-location.xml
//   java LogShop PORT fixed     the lookup returns null instead of throwing, and the log pattern
//                               asks for no location (includeLocation="false"): log4j2-plain.xml
// The log goes to stdout (the tests discard it).

import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

public class LogShop {
    private static final Logger LOG = LogManager.getLogger(LogShop.class);

    static final class NotCached extends Exception {
        NotCached(String key) {
            super("not cached: " + key);
        }
    }

    static boolean planted;

    /// Planted: a miss is an exception, built (with its stack) on every request.
    static long cachedPrice(int item) throws NotCached {
        throw new NotCached("item-" + item);
    }

    /// Fixed: a miss is null.
    static Long cachedPriceOrNull(int item) {
        return null;
    }

    static long price(int item) {
        long base = 100 + item % 17;
        if (planted) {
            try {
                return cachedPrice(item);
            } catch (NotCached e) {
                return base;
            }
        }
        Long cached = cachedPriceOrNull(item);
        return cached != null ? cached : base;
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        planted = args[1].equals("planted");
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 128);
        server.setExecutor(Executors.newFixedThreadPool(4));
        server.createContext("/", exchange -> {
            long total = 0;
            for (int item = 0; item < 20; item++) {
                total += price(item);
                LOG.info("priced item {} for order {}", item, total);
            }
            byte[] body = ("total " + total + "\n").getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
        System.err.println("listening on 127.0.0.1:" + port);
    }
}
