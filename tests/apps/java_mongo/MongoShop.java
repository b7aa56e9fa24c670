// The order service of tests/apps/python_mongo in Java, on the MongoDB Java driver under the
// OpenTelemetry Java agent (whose Mongo instrumentation writes each command as JSON with its
// values replaced by "?"), served by the JDK's HttpServer. Its DB calls are known by
// construction:
//
// - GET /orders/{user}: one find of the user's 15 orders, then one find of each order's items
//   in a loop (an N+1 of 15, at the line marked N_PLUS_ONE);
// - GET /orders-batched/{user}: the same, the items read in one find with $in (no N+1);
// - GET /profile/{user}: the user's document read twice, by two methods.
//
// It reads the data python_mongo seeded, requests each route once for users 1 and 2, and
// exits (the agent exports its spans on the way out). scripts/record-mongo-spans.sh runs it.

import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import com.mongodb.client.MongoDatabase;
import com.mongodb.client.model.Filters;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntFunction;
import org.bson.Document;

public class MongoShop {
    static MongoDatabase db;

    public static void main(String[] args) throws Exception {
        MongoClient client = MongoClients.create(args[0]);
        db = client.getDatabase("shop");
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        server.createContext("/orders/", ex -> answer(ex, MongoShop::orders));
        server.createContext("/orders-batched/", ex -> answer(ex, MongoShop::ordersBatched));
        server.createContext("/profile/", ex -> answer(ex, MongoShop::profile));
        server.start();
        int port = server.getAddress().getPort();
        for (int user = 1; user <= 2; user++) {
            for (String route : new String[] {"orders", "orders-batched", "profile"}) {
                URI uri = URI.create("http://127.0.0.1:" + port + "/" + route + "/" + user);
                HttpURLConnection c = (HttpURLConnection) uri.toURL().openConnection();
                if (c.getResponseCode() != 200) {
                    throw new IllegalStateException(uri + " answered " + c.getResponseCode());
                }
                c.getInputStream().readAllBytes();
            }
        }
        server.stop(0);
        client.close();
    }

    static void answer(HttpExchange ex, IntFunction<String> handler) {
        try (ex) {
            String path = ex.getRequestURI().getPath();
            int user = Integer.parseInt(path.substring(path.lastIndexOf('/') + 1));
            byte[] body = handler.apply(user).getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(body);
            }
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    static String orders(int user) {
        List<Document> found = db.getCollection("orders").find(Filters.eq("user_id", user)).into(new ArrayList<>());
        int items = 0;
        for (Document order : found) {
            items += db.getCollection("items").find(Filters.eq("order_id", order.get("_id"))).first() == null ? 0 : 1; // N_PLUS_ONE
        }
        return found.size() + " orders, " + items + " items";
    }

    static String ordersBatched(int user) {
        List<Document> found = db.getCollection("orders").find(Filters.eq("user_id", user)).into(new ArrayList<>());
        List<Object> ids = new ArrayList<>();
        for (Document order : found) {
            ids.add(order.get("_id"));
        }
        int items = db.getCollection("items").find(Filters.in("order_id", ids)).into(new ArrayList<>()).size();
        return found.size() + " orders, " + items + " items";
    }

    static String userName(int user) {
        return db.getCollection("users").find(Filters.eq("_id", user)).first().getString("name"); // FIRST_READ
    }

    static String userGreeting(int user) {
        return "hello " + db.getCollection("users").find(Filters.eq("_id", user)).first().getString("name"); // SECOND_READ
    }

    static String profile(int user) {
        return userName(user) + "; " + userGreeting(user);
    }
}
