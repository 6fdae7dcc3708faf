// krizaka_outbox from pgx v4 (Debian: golang-github-jackc-pgx-v4-dev).
//
// Appends in a business transaction, claims, completes with complete_many,
// fails one message, consumes once, runs a pull worker's loop with
// complete_and_claim, and receives envelopes of a NOTIFY route.
// Connects with the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE) to
// a database prepared by setup.sql; prints one line per check and exits 1 on
// any mismatch.  With Debian's packages, in GOPATH mode:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go run examples/drivers/go_pgx/main.go
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

const (
	driver = "pgx"
	typ    = "evt.shop.order_placed.v1"
	owner  = driver + "-worker-1"
)

var checks, failures int

func check(name string, got, want interface{}) {
	checks++
	if reflect.DeepEqual(got, want) {
		fmt.Printf("ok - %s\n", name)
	} else {
		failures++
		fmt.Printf("not ok - %s: got %#v, want %#v\n", name, got, want)
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// sqlstate is the SQLSTATE of an error, or "no error".
func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	if err != nil {
		return err.Error()
	}
	return "no error"
}

// jsonText is a payload as pgx sends it to a jsonb parameter: []byte (or a
// string) is taken as JSON text, so json.Marshal it; nil would be SQL NULL,
// while json.Marshal(nil) is the JSON null.
func jsonText(v interface{}) []byte {
	b, err := json.Marshal(v)
	must(err)
	return b
}

// newUUID is a random (version 4) uuid as text: pgx sends a string to a uuid
// parameter and scans a uuid into a string.
func newUUID() string {
	b := make([]byte, 16)
	_, err := rand.Read(b)
	must(err)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// idsOf runs a query and returns its column id, in order.
func idsOf(ctx context.Context, conn *pgx.Conn, sql string, args ...interface{}) []string {
	rows, err := conn.Query(ctx, sql, args...)
	must(err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		must(rows.Scan(&id))
		ids = append(ids, id)
	}
	must(rows.Err())
	return ids
}

func main() {
	ctx := context.Background()
	run := newUUID()[:8]
	var err error
	topic := "shop." + driver + "." + run
	conn, err := pgx.Connect(ctx, "")
	must(err)
	defer conn.Close(ctx)

	// 1. The business row and its events commit together (the deferred
	//    Rollback does nothing after Commit).
	payloads := []interface{}{map[string]interface{}{"item": "lamp", "qty": 2.0}, nil, []interface{}{1.0, 2.0, 3.0}, "gift wrap"}
	later := time.Now().Truncate(time.Second).Add(time.Hour)
	givenID := newUUID()
	var ids []string
	var delayedID string
	tx, err := conn.Begin(ctx)
	must(err)
	_, err = tx.Exec(ctx, "INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)", driver, "lamp-"+run)
	must(err)
	for _, p := range payloads {
		var id string
		must(tx.QueryRow(ctx, "SELECT outbox.append($1, $2, $3)", topic, typ, jsonText(p)).Scan(&id))
		ids = append(ids, id)
	}
	var id string
	must(tx.QueryRow(ctx, "SELECT outbox.append($1, $2, $3, $4)", topic, typ,
		jsonText(map[string]interface{}{"item": "desk"}), givenID).Scan(&id))
	ids = append(ids, id)
	payloads = append(payloads, map[string]interface{}{"item": "desk"})
	// available_at: a time.Time always carries its zone, so it is exact
	must(tx.QueryRow(ctx, "SELECT outbox.append($1, $2, $3, available_at => $4)", topic, typ,
		jsonText(map[string]interface{}{"item": "later"}), later).Scan(&delayedID))
	must(tx.Commit(ctx))
	check("append keeps the given id", ids[4], givenID)
	var stored time.Time
	must(conn.QueryRow(ctx, "SELECT available_at FROM outbox.message WHERE id = $1", delayedID).Scan(&stored))
	check("available_at stored exactly", stored.Equal(later), true)

	// 2. A rolled-back business transaction leaves no row and no message.
	rolledID := newUUID()
	tx, err = conn.Begin(ctx)
	must(err)
	_, err = tx.Exec(ctx, "INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)", driver, "umbrella-"+run)
	must(err)
	_, err = tx.Exec(ctx, "SELECT outbox.append($1, $2, $3, $4)", topic, typ,
		jsonText(map[string]interface{}{"item": "umbrella"}), rolledID)
	must(err)
	must(tx.Rollback(ctx))
	var messages, orders int64
	must(conn.QueryRow(ctx, "SELECT count(*) FROM outbox.message WHERE id = $1", rolledID).Scan(&messages))
	must(conn.QueryRow(ctx, "SELECT count(*) FROM public.shop_order WHERE item = $1", "umbrella-"+run).Scan(&orders))
	check("rolled back: no message", messages, int64(0))
	check("rolled back: no business row", orders, int64(0))

	// Pitfalls: a Go string is JSON text too (a bare word is no JSON), and a
	// nil payload is SQL NULL.
	_, err = conn.Exec(ctx, "SELECT outbox.append($1, $2, $3)", topic, typ, "gift wrap")
	check("a bare string fails (not JSON text)", sqlstate(err), "22P02")
	_, err = conn.Exec(ctx, "SELECT outbox.append($1, $2, $3)", topic, typ, nil)
	check("nil fails (SQL NULL)", sqlstate(err), "22004")

	// 3. Claim: an int for batch_size (pgx encodes it as the integer the
	//    server asks for), rows oldest first.
	rows, err := conn.Query(ctx, "SELECT id, payload, attempts FROM outbox.claim($1, $2, $3)", owner, topic, 10)
	must(err)
	var claimed []string
	var claimedPayloads []interface{}
	attempts := map[int32]bool{}
	for rows.Next() {
		var id string
		var payload []byte
		var n int32
		must(rows.Scan(&id, &payload, &n))
		var v interface{}
		must(json.Unmarshal(payload, &v))
		claimed = append(claimed, id)
		claimedPayloads = append(claimedPayloads, v)
		attempts[n] = true
	}
	must(rows.Err())
	check("claim: the due messages in order", claimed, ids)
	check("claim: payloads as appended", claimedPayloads, payloads)
	check("claim: first attempt", attempts, map[int32]bool{1: true})

	// 4. complete_many with a []string (the server says uuid[]); fail one.
	last := claimed[len(claimed)-1]
	var done int32
	must(conn.QueryRow(ctx, "SELECT outbox.complete_many($1, $2)", claimed[:len(claimed)-1], owner).Scan(&done))
	check("complete_many", int(done), len(claimed)-1)
	var failed bool
	must(conn.QueryRow(ctx, "SELECT outbox.fail($1, $2, $3)", last, owner, "HTTP 503 from the shipping service").Scan(&failed))
	check("fail", failed, true)
	var n int32
	var lastError string
	var backingOff bool
	must(conn.QueryRow(ctx, "SELECT attempts, last_error, available_at > now() FROM outbox.message WHERE id = $1",
		last).Scan(&n, &lastError, &backingOff))
	check("failed message backs off with its error", []interface{}{n, lastError, backingOff},
		[]interface{}{int32(1), "HTTP 503 from the shipping service", true})

	// 5. consume_once in the effect's transaction: true once, then false.
	for _, want := range []bool{true, false} {
		var first bool
		must(conn.BeginFunc(ctx, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT outbox.consume_once($1, $2)", "mailer", ids[0]).Scan(&first)
		}))
		check(fmt.Sprintf("consume_once gives %v", want), first, want)
	}

	// 6. topic_stats: counts are bigint (int64), the age an interval
	//    (time.Duration).
	var due, delayed, leased, dead, delivered int64
	var age time.Duration
	must(conn.QueryRow(ctx, "SELECT due, delayed, leased, dead, delivered, oldest_undelivered_age "+
		"FROM outbox.topic_stats WHERE topic = $1", topic).Scan(&due, &delayed, &leased, &dead, &delivered, &age))
	check("topic_stats counts", []int64{due, delayed, leased, dead, delivered},
		[]int64{0, 2, 0, 0, int64(len(claimed) - 1)})
	check("topic_stats age is a time.Duration", age >= 0, true)

	// 7. The pull worker's loop: complete_and_claim completes the batch
	//    just delivered and claims the next in one call and one commit.
	loop := topic + ".loop"
	var first, second string
	must(conn.BeginFunc(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT outbox.append($1, $2, $3)", loop, typ,
			jsonText(map[string]interface{}{"n": 1.0})).Scan(&first); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT outbox.append($1, $2, $3)", loop, typ,
			jsonText(map[string]interface{}{"n": 2.0})).Scan(&second)
	}))
	batch := idsOf(ctx, conn, "SELECT id FROM outbox.claim($1, $2, $3)", owner, loop, 1)
	check("claim one", batch, []string{first})
	batch = idsOf(ctx, conn, "SELECT id FROM outbox.complete_and_claim($1, $2, $3, $4)", batch, owner, loop, 10)
	check("complete_and_claim: the next batch", batch, []string{second})
	var lastDone int32
	must(conn.QueryRow(ctx, "SELECT outbox.complete_many($1, $2)", batch, owner).Scan(&lastDone))
	check("complete_many: the last batch", lastDone, int32(1))
	var loopDelivered int64
	must(conn.QueryRow(ctx, "SELECT count(*) FROM outbox.message WHERE topic = $1 AND delivered_at IS NOT NULL",
		loop).Scan(&loopDelivered))
	check("loop: both delivered", loopDelivered, int64(2))

	// 8. LISTEN on the channel of the route of 'shop.live' (a connection of
	//    its own); the background worker notifies after the commit.  A
	//    notification over 8000 bytes comes without its payload and with
	//    "truncated": true: fetch it with envelope_by_id.
	listener, err := pgx.Connect(ctx, "")
	must(err)
	_, err = listener.Exec(ctx, "LISTEN shop_events")
	must(err)
	var small, large string
	must(conn.BeginFunc(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)", driver, "chair-"+run); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT outbox.append('shop.live', $1, $2)", typ,
			jsonText(map[string]string{"driver": driver, "run": run})).Scan(&small); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT outbox.append('shop.live', $1, $2)", typ,
			jsonText(map[string]string{"driver": driver, "note": strings.Repeat("x", 9000)})).Scan(&large)
	}))
	envelopes := map[string]map[string]interface{}{}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	for len(envelopes) < 2 {
		note, err := listener.WaitForNotification(wait)
		if err != nil {
			break
		}
		var envelope map[string]interface{}
		must(json.Unmarshal([]byte(note.Payload), &envelope))
		if envelope["id"] == small || envelope["id"] == large {
			envelopes[envelope["id"].(string)] = envelope
		}
	}
	cancel()
	listener.Close(ctx)
	var got []string
	for id := range envelopes {
		got = append(got, id)
	}
	sort.Strings(got)
	want := []string{small, large}
	sort.Strings(want)
	check("notified both", got, want)
	envelope := envelopes[small]
	var keys []string
	for k := range envelope {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	check("envelope keys", keys, []string{"id", "occurredAt", "payload", "type"})
	check("envelope payload", envelope["payload"], map[string]interface{}{"driver": driver, "run": run})
	check("envelope type", envelope["type"], typ)
	occurredAt, _ := envelope["occurredAt"].(string)
	check("occurredAt in toISOString form",
		regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(occurredAt), true)
	_, hasPayload := envelopes[large]["payload"]
	check("large envelope truncated", []interface{}{envelopes[large]["truncated"], hasPayload},
		[]interface{}{true, false})
	var noteLength int
	must(conn.QueryRow(ctx, "SELECT length(outbox.envelope_by_id($1) -> 'payload' ->> 'note')", large).Scan(&noteLength))
	check("envelope_by_id gives the payload", noteLength, 9000)

	fmt.Printf("%s: %d checks, %d failed\n", driver, checks, failures)
	if failures > 0 {
		os.Exit(1)
	}
}
