#!/usr/bin/python3
"""krizaka_outbox from psycopg 3 (Debian: python3-psycopg).

The steps and the checks of the README's "Drivers" chapter, against a
database prepared by setup.sql, through the libpq environment (PGHOST,
PGPORT, PGUSER, PGDATABASE).
"""
import json
import secrets
import select
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.types.json import Json, Jsonb

from checks import check, check_envelopes, finish

DRIVER = "psycopg"
TYPE = "evt.shop.order_placed.v1"
OWNER = f"{DRIVER}-worker-1"


def one(conn, sql, params=()):
    return conn.execute(sql, params).fetchone()[0]


run = secrets.token_hex(4)
topic = f"shop.{DRIVER}.{run}"
conn = psycopg.connect(autocommit=True)
# A server zone far from UTC shows what a naive datetime does.
conn.execute("SET TimeZone = 'Asia/Tokyo'")

# 1. The business row and its events commit together.  Jsonb() sends jsonb,
#    so each Python value is the JSON value stored: dict, None (JSON null),
#    list (a JSON array) and str (a JSON string).
payloads = [{"item": "lamp", "qty": 2}, None, [1, 2, 3], "gift wrap"]
later = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
given_id = uuid.uuid4()
with conn.transaction():
    conn.execute("INSERT INTO public.shop_order (driver, item) VALUES (%s, %s)",
                 (DRIVER, f"lamp-{run}"))
    ids = [one(conn, "SELECT outbox.append(%s, %s, %s)", (topic, TYPE, Jsonb(p)))
           for p in payloads]
    ids.append(one(conn, "SELECT outbox.append(%s, %s, %s, %s)",
                   (topic, TYPE, Jsonb({"item": "desk"}), given_id)))
    payloads.append({"item": "desk"})
    # append_batch: a list of Jsonb is sent as jsonb[]
    batch = [{"item": "pen"}, None]
    ids += [row[0] for row in conn.execute(
        "SELECT * FROM outbox.append_batch(%s, %s, %s)",
        (topic, TYPE, [Jsonb(p) for p in batch])).fetchall()]
    payloads += batch
    # available_at: an aware datetime is exact whatever the server's zone
    delayed_id = one(conn, "SELECT outbox.append(%s, %s, %s, available_at => %s)",
                     (topic, TYPE, Jsonb({"item": "later"}), later))
check("append returns uuid.UUID", all(isinstance(i, uuid.UUID) for i in ids), True)
check("append keeps the given id", ids[4], given_id)
check("aware available_at stored exactly",
      one(conn, "SELECT available_at FROM outbox.message WHERE id = %s", (delayed_id,)),
      later)
# A naive datetime is sent as timestamp: the server reads it in its own zone.
naive = later.replace(tzinfo=None)
check("naive datetime read in the server's zone (Asia/Tokyo: 9 h early)",
      later - one(conn, "SELECT %s::timestamptz", (naive,)), timedelta(hours=9))

# 2. A rolled-back business transaction leaves no row and no message.
rolled_id = uuid.uuid4()
with conn.transaction():
    conn.execute("INSERT INTO public.shop_order (driver, item) VALUES (%s, %s)",
                 (DRIVER, f"umbrella-{run}"))
    conn.execute("SELECT outbox.append(%s, %s, %s, %s)",
                 (topic, TYPE, Jsonb({"item": "umbrella"}), rolled_id))
    raise psycopg.Rollback()
check("rolled back: no message",
      one(conn, "SELECT count(*) FROM outbox.message WHERE id = %s", (rolled_id,)), 0)
check("rolled back: no business row",
      one(conn, "SELECT count(*) FROM public.shop_order WHERE item = %s",
          (f"umbrella-{run}",)), 0)

# Pitfalls: Json() is sent as json, which has no implicit cast to jsonb, so
# no function matches; None is SQL NULL, not JSON null.
for name, value, error in (("Json() without ::jsonb", Json({}), psycopg.errors.UndefinedFunction),
                           ("None instead of Jsonb(None)", None, psycopg.errors.NullValueNotAllowed)):
    try:
        conn.execute("SELECT outbox.append(%s, %s, %s)", (topic, TYPE, value))
        check(f"{name} fails", "no error", error.sqlstate)
    except psycopg.Error as exc:
        check(f"{name} fails", exc.sqlstate, error.sqlstate)

# 3. Claim: a Python int for batch_size, rows oldest first.
rows = conn.execute("SELECT id, payload, attempts FROM outbox.claim(%s, %s, %s)",
                    (OWNER, topic, 10)).fetchall()
check("claim: the due messages in order", [r[0] for r in rows], ids)
check("claim: payloads as appended", [r[1] for r in rows], payloads)
check("claim: first attempt", {r[2] for r in rows}, {1})

# 4. complete_many takes a list of uuid.UUID (sent as uuid[]); fail one.
check("complete_many", one(conn, "SELECT outbox.complete_many(%s, %s)",
                           ([r[0] for r in rows[:-1]], OWNER)), len(rows) - 1)
check("fail", one(conn, "SELECT outbox.fail(%s, %s, %s)",
                  (rows[-1][0], OWNER, "HTTP 503 from the shipping service")), True)
check("failed message backs off with its error",
      conn.execute("SELECT attempts, last_error, available_at > now() "
                   "FROM outbox.message WHERE id = %s", (rows[-1][0],)).fetchone(),
      (1, "HTTP 503 from the shipping service", True))

# 5. consume_once in the effect's transaction: true once, then false.
def consume(message_id):
    with conn.transaction():
        return one(conn, "SELECT outbox.consume_once(%s, %s)", ("mailer", message_id))


check("consume_once first", consume(ids[0]), True)
check("consume_once again", consume(ids[0]), False)

# 6. topic_stats: counts are bigint (Python int), the age an interval (timedelta).
stats = conn.execute("SELECT due, delayed, leased, dead, delivered, oldest_undelivered_age "
                     "FROM outbox.topic_stats WHERE topic = %s", (topic,)).fetchone()
check("topic_stats counts", stats[:5], (0, 2, 0, 0, len(rows) - 1))
check("topic_stats age is a timedelta", isinstance(stats[5], timedelta) and stats[5] >= timedelta(0), True)

# 7. The pull worker's loop: complete_and_claim completes the batch just
#    delivered and claims the next in one call and one commit.
loop = f"{topic}.loop"
with conn.transaction():
    first, second = [one(conn, "SELECT outbox.append(%s, %s, %s)", (loop, TYPE, Jsonb({"n": n})))
                     for n in (1, 2)]
batch = [r[0] for r in conn.execute("SELECT id FROM outbox.claim(%s, %s, %s)",
                                    (OWNER, loop, 1)).fetchall()]
check("claim one", batch, [first])
batch = [r[0] for r in conn.execute("SELECT id FROM outbox.complete_and_claim(%s, %s, %s, %s)",
                                    (batch, OWNER, loop, 10)).fetchall()]
check("complete_and_claim: the next batch", batch, [second])
check("complete_many: the last batch", one(conn, "SELECT outbox.complete_many(%s, %s)",
                                            (batch, OWNER)), 1)
check("loop: both delivered",
      one(conn, "SELECT count(*) FROM outbox.message WHERE topic = %s AND delivered_at IS NOT NULL",
          (loop,)), 2)

# 8. LISTEN on the channel of the route of 'shop.live'; the background worker
#    notifies after the commit.  A notification over 8000 bytes comes without
#    its payload and with "truncated": true: fetch it with envelope_by_id.
listener = psycopg.connect(autocommit=True)
listener.execute("LISTEN shop_events")
received = []
listener.add_notify_handler(received.append)
with conn.transaction():
    conn.execute("INSERT INTO public.shop_order (driver, item) VALUES (%s, %s)",
                 (DRIVER, f"chair-{run}"))
    small = str(one(conn, "SELECT outbox.append('shop.live', %s, %s)",
                    (TYPE, Jsonb({"driver": DRIVER, "run": run}))))
    large = str(one(conn, "SELECT outbox.append('shop.live', %s, %s)",
                    (TYPE, Jsonb({"driver": DRIVER, "note": "x" * 9000}))))
envelopes = {}
deadline = time.monotonic() + 30
while len(envelopes) < 2 and time.monotonic() < deadline:
    select.select([listener.fileno()], [], [], deadline - time.monotonic())
    listener.execute("SELECT 1")        # reads what arrived; the handler keeps it
    while received:
        note = received.pop(0)
        envelope = json.loads(note.payload)
        if envelope["id"] in (small, large):
            envelopes[envelope["id"]] = envelope
listener.close()
full = one(conn, "SELECT outbox.envelope_by_id(%s)", (large,))
check_envelopes(envelopes, small, large, full, DRIVER, run, TYPE)

conn.close()
finish(DRIVER)
