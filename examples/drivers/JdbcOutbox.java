// krizaka_outbox from pgjdbc (Debian: libpostgresql-jdbc-java), Java 17.
//
// Appends in a business transaction, claims, completes with complete_many,
// fails one message, consumes once, runs a pull worker's loop with
// complete_and_claim, and receives envelopes of a NOTIFY route.
// Connects to jdbc:postgresql://$PGHOST:$PGPORT/$PGDATABASE as $PGUSER (a TCP
// host) to a database prepared by setup.sql; prints one line per check and
// exits 1 on any mismatch.  Runs from source:
//   java -cp /usr/share/java/postgresql.jar examples/drivers/JdbcOutbox.java
import java.sql.Array;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.UUID;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

public class JdbcOutbox {
    static final String DRIVER = "pgjdbc";
    static final String TYPE = "evt.shop.order_placed.v1";
    static final String OWNER = DRIVER + "-worker-1";
    static int checks = 0;
    static int failures = 0;

    static void check(String name, Object got, Object want) {
        checks++;
        if (Objects.equals(got, want)) {
            System.out.println("ok - " + name);
        } else {
            failures++;
            System.out.println("not ok - " + name + ": got " + got + ", want " + want);
        }
    }

    /** Runs a statement with its parameters and returns the first column of its first row. */
    static Object one(Connection conn, String sql, Object... params) throws SQLException {
        try (PreparedStatement st = conn.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                st.setObject(i + 1, params[i]);
            }
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getObject(1);
            }
        }
    }

    /** Runs a statement with its parameters and returns its column id, in order. */
    static List<UUID> idsOf(Connection conn, String sql, Object... params) throws SQLException {
        List<UUID> ids = new ArrayList<>();
        try (PreparedStatement st = conn.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                st.setObject(i + 1, params[i]);
            }
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next()) {
                    ids.add(rs.getObject("id", UUID.class));
                }
            }
        }
        return ids;
    }

    /** The SQLSTATE a statement fails with, or "no error". */
    static String sqlstateOf(PreparedStatement st) {
        try (st) {
            st.executeQuery().close();
            return "no error";
        } catch (SQLException e) {
            return e.getSQLState();
        }
    }

    /** The business row: an order of this driver. */
    static void insertOrder(Connection conn, String item) throws SQLException {
        try (PreparedStatement st = conn.prepareStatement(
                "INSERT INTO public.shop_order (driver, item) VALUES (?, ?)")) {
            st.setString(1, DRIVER);
            st.setString(2, item);
            st.executeUpdate();
        }
    }

    /** outbox.append with the payload as JSON text sent as an untyped value. */
    static UUID append(Connection conn, String topic, String json, UUID id) throws SQLException {
        try (PreparedStatement st = conn.prepareStatement("SELECT outbox.append(?, ?, ?, ?)")) {
            st.setString(1, topic);
            st.setString(2, TYPE);
            st.setObject(3, json, Types.OTHER);     // jsonb: Types.OTHER, not setString
            st.setObject(4, id);                     // java.util.UUID is sent as uuid; null: a new id
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getObject(1, UUID.class);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + System.getenv("PGHOST") + ":"
            + System.getenv().getOrDefault("PGPORT", "5432") + "/" + System.getenv("PGDATABASE");
        Properties props = new Properties();
        props.setProperty("user", System.getenv("PGUSER"));
        String run = UUID.randomUUID().toString().substring(0, 8);
        String topic = "shop." + DRIVER + "." + run;
        Connection conn = DriverManager.getConnection(url, props);
        try (Statement st = conn.createStatement()) {
            // A server zone far from UTC shows what a LocalDateTime does.
            st.execute("SET TimeZone = 'Asia/Tokyo'");
        }

        // 1. The business row and its events commit together.  Payloads are
        //    JSON text: an object, null, an array and a string.
        List<String> payloads = new ArrayList<>(List.of(
            "{\"item\": \"lamp\"}", "null", "[1, 2, 3]", "\"gift wrap\""));
        OffsetDateTime later = OffsetDateTime.now(ZoneOffset.UTC).truncatedTo(ChronoUnit.SECONDS).plusHours(1);
        UUID givenId = UUID.randomUUID();
        List<UUID> ids = new ArrayList<>();
        UUID delayedId;
        conn.setAutoCommit(false);
        try {
            insertOrder(conn, "lamp-" + run);
            for (String payload : payloads) {
                ids.add(append(conn, topic, payload, null));
            }
            ids.add(append(conn, topic, "{\"item\": \"desk\"}", givenId));
            payloads.add("{\"item\": \"desk\"}");
            // available_at: an OffsetDateTime is sent as timestamptz, exact
            try (PreparedStatement st = conn.prepareStatement(
                    "SELECT outbox.append(?, ?, ?, available_at => ?)")) {
                st.setString(1, topic);
                st.setString(2, TYPE);
                st.setObject(3, "{\"item\": \"later\"}", Types.OTHER);
                st.setObject(4, later);
                try (ResultSet rs = st.executeQuery()) {
                    rs.next();
                    delayedId = rs.getObject(1, UUID.class);
                }
            }
            conn.commit();
        } catch (SQLException e) {
            conn.rollback();
            throw e;
        }
        conn.setAutoCommit(true);
        check("append keeps the given id", ids.get(4), givenId);
        try (PreparedStatement st = conn.prepareStatement("SELECT available_at FROM outbox.message WHERE id = ?")) {
            st.setObject(1, delayedId);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                check("OffsetDateTime available_at stored exactly",
                    rs.getObject(1, OffsetDateTime.class).toInstant(), later.toInstant());
            }
        }
        // A LocalDateTime is sent as timestamp: the server reads it in its zone.
        LocalDateTime naive = later.toLocalDateTime();
        OffsetDateTime read;
        try (PreparedStatement st = conn.prepareStatement("SELECT ?::timestamptz")) {
            st.setObject(1, naive);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                read = rs.getObject(1, OffsetDateTime.class);
            }
        }
        check("LocalDateTime read in the server's zone (Asia/Tokyo: 9 h early)",
            Duration.between(read, later), Duration.ofHours(9));

        // 2. A rolled-back business transaction leaves no row and no message.
        UUID rolledId = UUID.randomUUID();
        conn.setAutoCommit(false);
        insertOrder(conn, "umbrella-" + run);
        append(conn, topic, "{\"item\": \"umbrella\"}", rolledId);
        conn.rollback();
        conn.setAutoCommit(true);
        check("rolled back: no message",
            one(conn, "SELECT count(*) FROM outbox.message WHERE id = ?", rolledId), 0L);
        check("rolled back: no business row",
            one(conn, "SELECT count(*) FROM public.shop_order WHERE item = ?", "umbrella-" + run), 0L);

        // Pitfalls: setString sends varchar (no function takes varchar where
        // it needs jsonb or uuid), setLong sends bigint (batch_size is
        // integer), setNull is SQL NULL.
        PreparedStatement bad = conn.prepareStatement("SELECT outbox.append(?, ?, ?)");
        bad.setString(1, topic);
        bad.setString(2, TYPE);
        bad.setString(3, "{}");
        check("setString for jsonb fails", sqlstateOf(bad), "42883");
        bad = conn.prepareStatement("SELECT outbox.complete(?, ?)");
        bad.setString(1, ids.get(0).toString());
        bad.setString(2, OWNER);
        check("setString for uuid fails", sqlstateOf(bad), "42883");
        bad = conn.prepareStatement("SELECT * FROM outbox.claim(?, ?, ?)");
        bad.setString(1, OWNER);
        bad.setString(2, topic);
        bad.setLong(3, 10L);
        check("setLong for batch_size fails", sqlstateOf(bad), "42883");
        bad = conn.prepareStatement("SELECT outbox.append(?, ?, ?)");
        bad.setString(1, topic);
        bad.setString(2, TYPE);
        bad.setNull(3, Types.OTHER);
        check("setNull for a JSON null fails", sqlstateOf(bad), "22004");
        // stringtype=unspecified sends every setString untyped: jsonb and
        // uuid then work, but a String[] is still varchar[].
        Properties untyped = new Properties(props);
        untyped.setProperty("stringtype", "unspecified");
        try (Connection loose = DriverManager.getConnection(url, untyped)) {
            check("stringtype=unspecified: setString reaches uuid",
                one(loose, "SELECT outbox.complete(?, ?)", ids.get(0).toString(), "nobody"), false);
            bad = loose.prepareStatement("SELECT outbox.complete_many(?, ?)");
            bad.setObject(1, new String[] {ids.get(0).toString()});
            bad.setString(2, OWNER);
            check("stringtype=unspecified: String[] still fails", sqlstateOf(bad), "42883");
        }

        // 3. Claim: setInt for batch_size, rows oldest first.
        List<UUID> claimed = new ArrayList<>();
        List<String> claimedPayloads = new ArrayList<>();
        boolean firstAttempt = true;
        try (PreparedStatement st = conn.prepareStatement(
                "SELECT id, payload, attempts FROM outbox.claim(?, ?, ?)")) {
            st.setString(1, OWNER);
            st.setString(2, topic);
            st.setInt(3, 10);
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next()) {
                    claimed.add(rs.getObject("id", UUID.class));
                    claimedPayloads.add(rs.getString("payload"));
                    firstAttempt &= rs.getInt("attempts") == 1;
                }
            }
        }
        check("claim: the due messages in order", claimed, ids);
        check("claim: payloads as appended", claimedPayloads, payloads);
        check("claim: first attempt", firstAttempt, true);

        // 4. complete_many with createArrayOf("uuid", UUID[]); fail the last one.
        UUID last = claimed.get(claimed.size() - 1);
        Array done = conn.createArrayOf("uuid", claimed.subList(0, claimed.size() - 1).toArray(new UUID[0]));
        check("complete_many", one(conn, "SELECT outbox.complete_many(?, ?)", done, OWNER), claimed.size() - 1);
        check("fail", one(conn, "SELECT outbox.fail(?, ?, ?)", last, OWNER, "HTTP 503 from the shipping service"),
            true);
        try (PreparedStatement st = conn.prepareStatement(
                "SELECT attempts, last_error, available_at > now() FROM outbox.message WHERE id = ?")) {
            st.setObject(1, last);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                check("failed message backs off with its error",
                    List.of(rs.getInt(1), rs.getString(2), rs.getBoolean(3)),
                    List.of(1, "HTTP 503 from the shipping service", true));
            }
        }

        // 5. consume_once in the effect's transaction: true once, then false.
        for (boolean want : new boolean[] {true, false}) {
            conn.setAutoCommit(false);
            Object first = one(conn, "SELECT outbox.consume_once(?, ?)", "mailer", ids.get(0));
            conn.commit();
            conn.setAutoCommit(true);
            check("consume_once " + (want ? "first" : "again"), first, want);
        }

        // 6. topic_stats: counts are bigint (getLong), the age an interval
        //    (PGInterval; extract(epoch …) gives seconds).
        try (PreparedStatement st = conn.prepareStatement(
                "SELECT due, delayed, leased, dead, delivered, oldest_undelivered_age, "
                + "extract(epoch FROM oldest_undelivered_age)::float8 "
                + "FROM outbox.topic_stats WHERE topic = ?")) {
            st.setString(1, topic);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                check("topic_stats counts",
                    List.of(rs.getLong(1), rs.getLong(2), rs.getLong(3), rs.getLong(4), rs.getLong(5)),
                    List.of(0L, 2L, 0L, 0L, (long) claimed.size() - 1));
                check("topic_stats age is a PGInterval",
                    rs.getObject(6).getClass().getName(), "org.postgresql.util.PGInterval");
                check("topic_stats age in seconds", rs.getDouble(7) >= 0, true);
            }
        }

        // 7. The pull worker's loop: complete_and_claim completes the batch
        //    just delivered and claims the next in one call and one commit.
        String loop = topic + ".loop";
        conn.setAutoCommit(false);
        UUID first = append(conn, loop, "{\"n\": 1}", null);
        UUID second = append(conn, loop, "{\"n\": 2}", null);
        conn.commit();
        conn.setAutoCommit(true);
        List<UUID> batch = idsOf(conn, "SELECT id FROM outbox.claim(?, ?, ?)", OWNER, loop, 1);
        check("claim one", batch, List.of(first));
        batch = idsOf(conn, "SELECT id FROM outbox.complete_and_claim(?, ?, ?, ?)",
            conn.createArrayOf("uuid", batch.toArray(new UUID[0])), OWNER, loop, 10);
        check("complete_and_claim: the next batch", batch, List.of(second));
        check("complete_many: the last batch", one(conn, "SELECT outbox.complete_many(?, ?)",
            conn.createArrayOf("uuid", batch.toArray(new UUID[0])), OWNER), 1);
        check("loop: both delivered", one(conn,
            "SELECT count(*)::int FROM outbox.message WHERE topic = ? AND delivered_at IS NOT NULL", loop), 2);

        // 8. LISTEN on the channel of the route of 'shop.live'; the background
        //    worker notifies after the commit.  A notification over 8000 bytes
        //    comes without its payload and with "truncated": true: fetch it
        //    with envelope_by_id.  The JDK has no JSON parser: the server
        //    reads the envelopes here (an application would use its own).
        Connection listener = DriverManager.getConnection(url, props);
        try (Statement st = listener.createStatement()) {
            st.execute("LISTEN shop_events");
        }
        conn.setAutoCommit(false);
        insertOrder(conn, "chair-" + run);
        String smallPayload = "{\"run\": \"" + run + "\", \"driver\": \"" + DRIVER + "\"}";
        String small = append(conn, "shop.live", smallPayload, null).toString();
        String large = append(conn, "shop.live", "{\"note\": \"" + "x".repeat(9000) + "\"}", null).toString();
        conn.commit();
        conn.setAutoCommit(true);
        Map<String, String> envelopes = new HashMap<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        PGConnection pgListener = listener.unwrap(PGConnection.class);
        while (envelopes.size() < 2 && System.nanoTime() < deadline) {
            int wait = (int) Math.max(1, (deadline - System.nanoTime()) / 1_000_000);
            PGNotification[] arrived = pgListener.getNotifications(wait);
            for (PGNotification n : arrived == null ? new PGNotification[0] : arrived) {
                String id = (String) one(conn, "SELECT ?::jsonb ->> 'id'", n.getParameter());
                if (small.equals(id) || large.equals(id)) {
                    envelopes.put(id, n.getParameter());
                }
            }
        }
        listener.close();
        check("notified both", envelopes.keySet(), java.util.Set.of(small, large));
        String sql = "SELECT (SELECT string_agg(k, ',' ORDER BY k) FROM jsonb_object_keys(e) k), "
            + "e ->> 'type', e -> 'payload' = ?::jsonb, e ->> 'occurredAt' ~ ?, "
            + "coalesce(e ->> 'truncated', 'false'), e -> 'payload' IS NOT NULL FROM (SELECT ?::jsonb AS e) s";
        try (PreparedStatement st = conn.prepareStatement(sql)) {
            st.setString(1, smallPayload);
            st.setString(2, "^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z$");
            st.setString(3, envelopes.getOrDefault(small, "{}"));
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                check("envelope keys", rs.getString(1), "id,occurredAt,payload,type");
                check("envelope type", rs.getString(2), TYPE);
                check("envelope payload", rs.getBoolean(3), true);
                check("occurredAt in toISOString form", rs.getBoolean(4), true);
            }
            st.setString(3, envelopes.getOrDefault(large, "{}"));
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                check("large envelope truncated", List.of(rs.getString(5), rs.getBoolean(6)), List.of("true", false));
            }
        }
        check("envelope_by_id gives the payload",
            one(conn, "SELECT length(outbox.envelope_by_id(?) -> 'payload' ->> 'note')", UUID.fromString(large)), 9000);

        conn.close();
        System.out.println(DRIVER + ": " + checks + " checks, " + failures + " failed");
        System.exit(failures == 0 ? 0 : 1);
    }
}
