// A JVM with a known GC pattern, for kiln's runtime tests: a steady allocation rate that
// makes young collections, and System.gc() (a full collection on G1) every PERIOD ms.
// Run with -Xlog:gc and -Xlog:safepoint: the JVM's own logs are the ground truth. With a
// port it also answers HTTP (JDK's own server), a target for kiln run --watch-port. LIVE_MB
// keeps that much alive in small objects, which every full collection has to mark and move.
//
//   java -Xmx64m -Xmn8m -XX:+UseG1GC GcPattern PERIOD_MS SECONDS [PORT [LIVE_MB]]
public class GcPattern {
    static volatile Object sink;
    static Object[] live;

    public static void main(String[] args) throws Exception {
        long periodMs = Long.parseLong(args[0]);
        long end = System.nanoTime() + Long.parseLong(args[1]) * 1_000_000_000L;
        int liveMb = args.length > 3 ? Integer.parseInt(args[3]) : 0;
        // 64-byte arrays plus their headers: about 80 bytes each
        live = new Object[liveMb * 1024 * 1024 / 80];
        for (int i = 0; i < live.length; i++) {
            live[i] = new byte[64];
        }
        Thread full = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(periodMs);
                } catch (InterruptedException e) {
                    return;
                }
                System.gc();
            }
        }, "full-gc-every-period");
        full.setDaemon(true);
        full.start();
        if (args.length > 2) {
            com.sun.net.httpserver.HttpServer http = com.sun.net.httpserver.HttpServer.create(
                    new java.net.InetSocketAddress("127.0.0.1", Integer.parseInt(args[2])), 128);
            byte[] ok = "ok\n".getBytes();
            http.createContext("/", exchange -> {
                exchange.sendResponseHeaders(200, ok.length);
                exchange.getResponseBody().write(ok);
                exchange.close();
            });
            http.start();
        }
        System.out.println("ready");
        while (System.nanoTime() < end) {
            // About 100 MB/s: a young collection every several tens of ms with -Xmn8m.
            for (int i = 0; i < 100; i++) {
                sink = new byte[1024];
            }
            Thread.sleep(1);
        }
        System.exit(0);
    }
}
