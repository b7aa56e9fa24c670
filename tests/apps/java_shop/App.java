// A small shop on PostgreSQL over plain JDBC, served by the JDK's HTTP server, whose DB calls
// are known by construction (kiln's query-analyzer tests). Run under the OpenTelemetry Java
// agent with the span-stacktrace extension, it exports its spans to kiln:
//   GET /authors  : one query for the authors, then one per author (an N+1, line "N+1 LOOP");
//   GET /bulk     : the same data in one JOIN;
//   GET /settings : one identical query REPEATS times (line "REPEATED").
// Arguments: JDBC URL, port, number of authors, repeats.

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

public class App {
    static Connection conn;
    static int repeats;

    public static void main(String[] args) throws Exception {
        conn = DriverManager.getConnection(args[0]);
        int port = Integer.parseInt(args[1]);
        int authors = Integer.parseInt(args[2]);
        repeats = Integer.parseInt(args[3]);
        seed(authors);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
        server.createContext("/authors", ex -> answer(ex, App::authors));
        server.createContext("/bulk", ex -> answer(ex, App::bulk));
        server.createContext("/settings", ex -> answer(ex, App::settings));
        server.start();
    }

    interface Page {
        String render() throws SQLException;
    }

    static void answer(HttpExchange ex, Page page) throws IOException {
        byte[] body;
        int status = 200;
        try {
            body = page.render().getBytes(StandardCharsets.UTF_8);
        } catch (SQLException e) {
            status = 500;
            body = e.toString().getBytes(StandardCharsets.UTF_8);
        }
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    static void seed(int authors) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute("DROP TABLE IF EXISTS books, authors, settings");
            st.execute("CREATE TABLE authors (id int PRIMARY KEY, name text NOT NULL)");
            st.execute("CREATE TABLE books (id serial PRIMARY KEY, author_id int REFERENCES authors, title text)");
            st.execute("CREATE TABLE settings (name text PRIMARY KEY, value text)");
            st.execute("INSERT INTO settings VALUES ('currency', 'EUR')");
        }
        try (PreparedStatement a = conn.prepareStatement("INSERT INTO authors VALUES (?, ?)");
             PreparedStatement b = conn.prepareStatement("INSERT INTO books (author_id, title) VALUES (?, ?)")) {
            for (int i = 0; i < authors; i++) {
                a.setInt(1, i);
                a.setString(2, "author " + i);
                a.addBatch();
                for (int j = 0; j < 2; j++) {
                    b.setInt(1, i);
                    b.setString(2, "book " + i + "." + j);
                    b.addBatch();
                }
            }
            a.executeBatch();
            b.executeBatch();
        }
    }

    static String authors() throws SQLException {
        StringBuilder out = new StringBuilder();
        try (Statement st = conn.createStatement();
             ResultSet rs = st.executeQuery("SELECT id, name FROM authors ORDER BY id");
             PreparedStatement books = conn.prepareStatement("SELECT title FROM books WHERE author_id = ? ORDER BY id")) {
            while (rs.next()) {
                books.setInt(1, rs.getInt(1));
                try (ResultSet titles = books.executeQuery()) { // N+1 LOOP
                    out.append(rs.getString(2)).append(':');
                    while (titles.next()) {
                        out.append(' ').append(titles.getString(1));
                    }
                    out.append('\n');
                }
            }
        }
        return out.toString();
    }

    static String bulk() throws SQLException {
        StringBuilder out = new StringBuilder();
        try (Statement st = conn.createStatement();
             ResultSet rs = st.executeQuery(
                 "SELECT a.id, a.name, b.title FROM authors a JOIN books b ON b.author_id = a.id ORDER BY a.id, b.id")) {
            while (rs.next()) {
                out.append(rs.getString(2)).append(": ").append(rs.getString(3)).append('\n');
            }
        }
        return out.toString();
    }

    static String settings() throws SQLException {
        StringBuilder out = new StringBuilder();
        try (PreparedStatement st = conn.prepareStatement("SELECT value FROM settings WHERE name = ?")) {
            for (int i = 0; i < repeats; i++) {
                st.setString(1, "currency");
                try (ResultSet rs = st.executeQuery()) { // REPEATED
                    rs.next();
                    out.append(rs.getString(1)).append('\n');
                }
            }
        }
        return out.toString();
    }
}
