// The held-out-style service of the second case study (a Java service under JMeter whose CPU
// went to JSON, exceptions used for control flow and log4j2's location capture): each request
// parses its order as JSON (Jackson), prices the order's items by throwing and catching an
// exception for "not cached", and logs the items through log4j2 with the caller's location
// (log4j2-location.xml of tests/apps/java_logs). Each part is a method of its own, and the
// service times the CPU each takes with the thread's own CPU clock, per wall-clock second:
// the shares a profile of it must find.
//   java CaseShop PORT CPU_FILE
// When stopped (SIGTERM) it writes "UNIX_SECOND PART NANOSECONDS" lines to CPU_FILE, PART one
// of json, exceptions, logging.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.LongAdder;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

public class CaseShop {
    private static final Logger LOG = LogManager.getLogger(CaseShop.class);
    static final ObjectMapper MAPPER = new ObjectMapper();
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    static final ConcurrentHashMap<String, LongAdder> SPENT = new ConcurrentHashMap<>();
    static final String ORDER = order(40);

    static String order(int items) {
        StringBuilder json = new StringBuilder("{\"id\":\"order-17\",\"customer\":{\"name\":\"Ada\",");
        json.append("\"tier\":\"gold\"},\"items\":[");
        for (int i = 0; i < items; i++) {
            if (i > 0) {
                json.append(',');
            }
            json.append("{\"sku\":\"sku-").append(i).append("\",\"quantity\":").append(i % 5 + 1)
                .append(",\"tags\":[\"a\",\"b\",\"c\"],\"note\":\"handle with care\"}");
        }
        return json.append("]}").toString();
    }

    /// The CPU this thread spent since `fromNs` of its CPU clock, counted for `part`.
    static void spent(String part, long fromNs) {
        long ns = CPU.getCurrentThreadCpuTime() - fromNs;
        long second = System.currentTimeMillis() / 1000;
        SPENT.computeIfAbsent(second + " " + part, k -> new LongAdder()).add(ns);
    }

    static int parseOrder() throws IOException {
        int items = 0;
        for (int i = 0; i < 4; i++) {
            JsonNode order = MAPPER.readTree(ORDER);
            items = order.get("items").size();
        }
        return items;
    }

    static final class NotCached extends Exception {
        NotCached(String key) {
            super("not cached: " + key);
        }
    }

    /// A cache miss is an exception, built with its stack (the lookup's 16 frames and the
    /// request's) and caught where it is thrown.
    static long cachedPrice(int item) throws NotCached {
        throw new NotCached("item-" + item);
    }

    static long lookup(int item, int depth) {
        if (depth > 0) {
            return lookup(item, depth - 1);
        }
        try {
            return cachedPrice(item);
        } catch (NotCached e) {
            return 100 + item % 17;
        }
    }

    static long priceItems(int items) {
        long total = 0;
        for (int item = 0; item < items; item++) {
            total += lookup(item, 16);
        }
        return total;
    }

    static void logItems(int items, long total) {
        for (int item = 0; item < items / 2; item++) {
            LOG.info("priced item {} for order {}", item, total);
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String cpuFile = args[1];
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try (PrintWriter out = new PrintWriter(cpuFile, StandardCharsets.UTF_8)) {
                for (Map.Entry<String, LongAdder> e : SPENT.entrySet()) {
                    out.println(e.getKey() + " " + e.getValue().sum());
                }
            } catch (Exception e) {
                e.printStackTrace();
            }
        }));
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 128);
        server.setExecutor(Executors.newFixedThreadPool(4));
        server.createContext("/", exchange -> {
            long from = CPU.getCurrentThreadCpuTime();
            int items = parseOrder();
            spent("json", from);
            from = CPU.getCurrentThreadCpuTime();
            long total = priceItems(items);
            spent("exceptions", from);
            from = CPU.getCurrentThreadCpuTime();
            logItems(items, total);
            spent("logging", from);
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
