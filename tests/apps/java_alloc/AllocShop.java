import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.util.concurrent.Executors;

/// A service whose allocations per request are known by construction: 64 KiB at one site
/// (`render`) and 16 KiB at another (`checksum`), kept reachable just long enough that the
/// JIT cannot take them away (escape analysis), plus what the JDK's HTTP server allocates
/// for the exchange itself (a few KiB). kiln's allocation profile must give 80 KiB a request
/// (and a little more) and the two sites in the ratio 4:1.
public class AllocShop {
    static volatile byte[] lastPage, lastSum;

    static byte[] render(int n) {
        byte[] page = new byte[64 * 1024];
        page[n & 0xffff] = 1;
        lastPage = page;
        return page;
    }

    static byte[] checksum(byte[] page) {
        byte[] sum = new byte[16 * 1024];
        sum[page.length & 0x3fff] = page[0];
        lastSum = sum;
        return sum;
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 128);
        server.setExecutor(Executors.newFixedThreadPool(2));
        final int[] count = {0};
        server.createContext("/", exchange -> {
            byte[] page = render(count[0]++);
            byte[] sum = checksum(page);
            byte[] body = ("ok " + sum.length + "\n").getBytes();
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
    }
}
