// The JDK's own HTTP server (com.sun.net.httpserver) as most small Java services use it:
// sendResponseHeaders, then the body. Without -Dsun.net.httpserver.nodelay=true its sockets
// keep Nagle's algorithm, the body waits for the client's delayed ACK of the headers, and
// every response takes ~40 ms on Linux. Prints "listening on PORT".

import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;

public class WireServer {
    public static void main(String[] args) throws Exception {
        byte[] body = "x".repeat(200).getBytes(StandardCharsets.US_ASCII);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
        server.setExecutor(Executors.newFixedThreadPool(4));
        server.createContext("/", ex -> {
            ex.getResponseHeaders().set("Content-Type", "text/plain");
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
        System.out.println("listening on " + server.getAddress().getPort());
        System.out.flush();
    }
}
