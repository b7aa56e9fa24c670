// A service whose every request takes one lock, as a slow call made under a lock does:
//   java LockShop PORT locked|parked|unlocked WAITS_FILE
// `locked` sleeps HOLD_MS inside a synchronized block on the Inventory (request threads queue
// at its monitor: JFR's jdk.JavaMonitorEnter), `parked` inside a ReentrantLock (they park:
// jdk.ThreadPark), `unlocked` sleeps outside and takes the monitor only to count.
// The truth kiln is checked against: the service times every wait for the lock itself and,
// when stopped (SIGTERM), writes each one of at least MIN_RECORDED_MS to WAITS_FILE as
// "START_UNIX_MS DURATION_US THREAD" lines, and every call of reserve (the wait, the hold and
// all) to WAITS_FILE.calls as "START_UNIX_MS DURATION_US" lines: the time a wall-clock
// profile must find in reserve.

import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Executors;
import java.util.concurrent.locks.ReentrantLock;

public class LockShop {
    static final long HOLD_MS = 10;
    static final long MIN_RECORDED_MS = 1;

    static final class Inventory {
        long reserved;
    }

    static final Inventory INVENTORY = new Inventory();
    static final ReentrantLock LEDGER = new ReentrantLock();
    static final ConcurrentLinkedQueue<String> WAITS = new ConcurrentLinkedQueue<>();
    static final ConcurrentLinkedQueue<String> CALLS = new ConcurrentLinkedQueue<>();

    static void waited(long startMs, long fromNs) {
        long us = (System.nanoTime() - fromNs) / 1000;
        if (us >= MIN_RECORDED_MS * 1000) {
            WAITS.add(startMs + " " + us + " " + Thread.currentThread().getName());
        }
    }

    static void reserve(String mode) throws InterruptedException {
        long startMs = System.currentTimeMillis();
        long fromNs = System.nanoTime();
        switch (mode) {
            case "locked":
                synchronized (INVENTORY) {
                    waited(startMs, fromNs);
                    Thread.sleep(HOLD_MS);
                    INVENTORY.reserved++;
                }
                break;
            case "parked":
                LEDGER.lock();
                try {
                    waited(startMs, fromNs);
                    Thread.sleep(HOLD_MS);
                } finally {
                    LEDGER.unlock();
                }
                break;
            default:
                Thread.sleep(HOLD_MS);
                synchronized (INVENTORY) {
                    INVENTORY.reserved++;
                }
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String mode = args[1];
        String waitsFile = args[2];
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try (PrintWriter out = new PrintWriter(waitsFile, StandardCharsets.UTF_8);
                    PrintWriter calls = new PrintWriter(waitsFile + ".calls", StandardCharsets.UTF_8)) {
                for (String line : WAITS) {
                    out.println(line);
                }
                for (String line : CALLS) {
                    calls.println(line);
                }
            } catch (Exception e) {
                e.printStackTrace();
            }
        }));
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 128);
        server.setExecutor(Executors.newFixedThreadPool(8, r -> {
            Thread t = new Thread(r);
            t.setName("request-" + t.getId());
            return t;
        }));
        server.createContext("/", exchange -> {
            long startMs = System.currentTimeMillis();
            long fromNs = System.nanoTime();
            try {
                reserve(mode);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            CALLS.add(startMs + " " + (System.nanoTime() - fromNs) / 1000);
            byte[] body = "reserved\n".getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
        System.err.println("listening on 127.0.0.1:" + port);
    }
}
