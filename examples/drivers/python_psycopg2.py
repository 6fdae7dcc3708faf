#!/usr/bin/python3
"""krizaka_outbox from psycopg2 (Debian: python3-psycopg2).

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

import psycopg2
import psycopg2.errorcodes
from psycopg2.extras import Json, register_uuid

from checks import check, check_envelopes, finish

DRIVER = "psycopg2"
TYPE = "evt.shop.order_placed.v1"
OWNER = f"{DRIVER}-worker-1"


def one(cur, sql, params=()):
    cur.execute(sql, params)
    return cur.fetchone()[0]


def sqlstate_of(cur, sql, params):
    """The SQLSTATE a statement fails with, in a transaction rolled back."""
    try:
        with cur.connection:
            cur.execute(sql, params)
        return "no error"
    except psycopg2.Error as exc:
        return exc.pgcode


# uuid.UUID values are sent as uuid (and lists of them as uuid[]) and uuid
# columns come back as uuid.UUID; without it psycopg2 cannot adapt a UUID.
register_uuid()

run = secrets.token_hex(4)
topic = f"shop.{DRIVER}.{run}"
conn = psycopg2.connect("")         # libpq environment
cur = conn.cursor()
with conn:
    # A server zone far from UTC shows what a naive datetime does.
    cur.execute("SET TimeZone = 'Asia/Tokyo'")

# 1. The business row and its events commit together: `with conn` commits at
#    the end of the block (rolls back on an exception).  Json() sends the JSON
#    text as an untyped literal, which the server reads as jsonb: a dict,
#    None (JSON null), a list (JSON array) and a str (JSON string).
payloads = [{"item": "lamp", "qty": 2}, None, [1, 2, 3], "gift wrap"]
later = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
given_id = uuid.uuid4()
with conn:
    cur.execute("INSERT INTO public.shop_order (driver, item) VALUES (%s, %s)",
                (DRIVER, f"lamp-{run}"))
    ids = [one(cur, "SELECT outbox.append(%s, %s, %s)", (topic, TYPE, Json(p)))
           for p in payloads]
    ids.append(one(cur, "SELECT outbox.append(%s, %s, %s, %s)",
                   (topic, TYPE, Json({"item": "desk"}), given_id)))
    payloads.append({"item": "desk"})
    # append_batch: a list of Json is a text[] literal; cast it to jsonb[]
    cur.execute("SELECT * FROM outbox.append_batch(%s, %s, %s::jsonb[])",
                (topic, TYPE, [Json({"item": "pen"}), Json(None)]))
    ids += [row[0] for row in cur.fetchall()]
    payloads += [{"item": "pen"}, None]
    # available_at: an aware datetime is exact whatever the server's zone
    delayed_id = one(cur, "SELECT outbox.append(%s, %s, %s, available_at => %s)",
                     (topic, TYPE, Json({"item": "later"}), later))
check("append returns uuid.UUID", all(isinstance(i, uuid.UUID) for i in ids), True)
check("append keeps the given id", ids[4], given_id)
with conn:
    check("aware available_at stored exactly",
          one(cur, "SELECT available_at FROM outbox.message WHERE id = %s", (delayed_id,)),
          later)
    # A naive datetime is sent as timestamp: the server reads it in its zone.
    naive = later.replace(tzinfo=None)
    check("naive datetime read in the server's zone (Asia/Tokyo: 9 h early)",
          later - one(cur, "SELECT %s::timestamptz", (naive,)), timedelta(hours=9))

# 2. A rolled-back business transaction leaves no row and no message.
rolled_id = uuid.uuid4()
try:
    with conn:
        cur.execute("INSERT INTO public.shop_order (driver, item) VALUES (%s, %s)",
                    (DRIVER, f"umbrella-{run}"))
        cur.execute("SELECT outbox.append(%s, %s, %s, %s)",
                    (topic, TYPE, Json({"item": "umbrella"}), rolled_id))
        raise RuntimeError("payment declined")
except RuntimeError:
    pass
with conn:
    check("rolled back: no message",
          one(cur, "SELECT count(*) FROM outbox.message WHERE id = %s", (rolled_id,)), 0)
    check("rolled back: no business row",
          one(cur, "SELECT count(*) FROM public.shop_order WHERE item = %s",
              (f"umbrella-{run}",)), 0)

# Pitfalls: None is SQL NULL, not JSON null; a list of str is a text[] and a
# list of Json() too, which match no function without a cast.
check("None instead of Json(None) fails",
      sqlstate_of(cur, "SELECT outbox.append(%s, %s, %s)", (topic, TYPE, None)),
      "22004")         # errorcodes gives that name to 39004 as well
check("append_batch with a list of Json() and no cast fails",
      sqlstate_of(cur, "SELECT outbox.append_batch(%s, %s, %s)", (topic, TYPE, [Json({})])),
      psycopg2.errorcodes.UNDEFINED_FUNCTION)
check("complete_many with a list of str and no cast fails",
      sqlstate_of(cur, "SELECT outbox.complete_many(%s, %s)", ([str(ids[0])], OWNER)),
      psycopg2.errorcodes.UNDEFINED_FUNCTION)

# 3. Claim: a Python int for batch_size, rows oldest first.
with conn:
    cur.execute("SELECT id, payload, attempts FROM outbox.claim(%s, %s, %s)",
                (OWNER, topic, 10))
    rows = cur.fetchall()
check("claim: the due messages in order", [r[0] for r in rows], ids)
check("claim: payloads as appended", [r[1] for r in rows], payloads)
check("claim: first attempt", {r[2] for r in rows}, {1})

# 4. complete_many with a list of uuid.UUID (uuid[] through register_uuid);
#    a list of id strings needs %s::uuid[].  Then fail the last one.
with conn:
    half = len(rows) // 2
    done = one(cur, "SELECT outbox.complete_many(%s, %s)", ([r[0] for r in rows[:half]], OWNER))
    done += one(cur, "SELECT outbox.complete_many(%s::uuid[], %s)",
                ([str(r[0]) for r in rows[half:-1]], OWNER))
    check("complete_many", done, len(rows) - 1)
    check("fail", one(cur, "SELECT outbox.fail(%s, %s, %s)",
                      (rows[-1][0], OWNER, "HTTP 503 from the shipping service")), True)
    cur.execute("SELECT attempts, last_error, available_at > now() "
                "FROM outbox.message WHERE id = %s", (rows[-1][0],))
    check("failed message backs off with its error", cur.fetchone(),
          (1, "HTTP 503 from the shipping service", True))


# 5. consume_once in the effect's transaction: true once, then false.
def consume(message_id):
    with conn:
        return one(cur, "SELECT outbox.consume_once(%s, %s)", ("mailer", message_id))


check("consume_once first", consume(ids[0]), True)
check("consume_once again", consume(ids[0]), False)

# 6. topic_stats: counts are bigint (Python int), the age an interval (timedelta).
with conn:
    cur.execute("SELECT due, delayed, leased, dead, delivered, oldest_undelivered_age "
                "FROM outbox.topic_stats WHERE topic = %s", (topic,))
    stats = cur.fetchone()
check("topic_stats counts", stats[:5], (0, 2, 0, 0, len(rows) - 1))
check("topic_stats age is a timedelta", isinstance(stats[5], timedelta) and stats[5] >= timedelta(0), True)

# 7. The pull worker's loop: complete_and_claim completes the batch just
#    delivered and claims the next in one call and one commit.
loop = f"{topic}.loop"
with conn:
    first, second = [one(cur, "SELECT outbox.append(%s, %s, %s)", (loop, TYPE, Json({"n": n})))
                     for n in (1, 2)]
with conn:
    cur.execute("SELECT id FROM outbox.claim(%s, %s, %s)", (OWNER, loop, 1))
    batch = [r[0] for r in cur.fetchall()]
check("claim one", batch, [first])
with conn:
    cur.execute("SELECT id FROM outbox.complete_and_claim(%s, %s, %s, %s)",
                (batch, OWNER, loop, 10))
    batch = [r[0] for r in cur.fetchall()]
check("complete_and_claim: the next batch", batch, [second])
with conn:
    check("complete_many: the last batch",
          one(cur, "SELECT outbox.complete_many(%s, %s)", (batch, OWNER)), 1)
    check("loop: both delivered",
          one(cur, "SELECT count(*) FROM outbox.message WHERE topic = %s AND delivered_at IS NOT NULL",
              (loop,)), 2)

# 8. LISTEN on the channel of the route of 'shop.live' (an autocommit
#    connection); the background worker notifies after the commit.  A
#    notification over 8000 bytes comes without its payload and with
#    "truncated": true: fetch it with envelope_by_id.
listener = psycopg2.connect("")
listener.autocommit = True
listener.cursor().execute("LISTEN shop_events")
with conn:
    cur.execute("INSERT INTO public.shop_order (driver, item) VALUES (%s, %s)",
                (DRIVER, f"chair-{run}"))
    small = str(one(cur, "SELECT outbox.append('shop.live', %s, %s)",
                    (TYPE, Json({"driver": DRIVER, "run": run}))))
    large = str(one(cur, "SELECT outbox.append('shop.live', %s, %s)",
                    (TYPE, Json({"driver": DRIVER, "note": "x" * 9000}))))
envelopes = {}
deadline = time.monotonic() + 30
while len(envelopes) < 2 and time.monotonic() < deadline:
    select.select([listener], [], [], deadline - time.monotonic())
    listener.poll()
    while listener.notifies:
        envelope = json.loads(listener.notifies.pop(0).payload)
        if envelope["id"] in (small, large):
            envelopes[envelope["id"]] = envelope
listener.close()
with conn:
    full = one(cur, "SELECT outbox.envelope_by_id(%s)", (large,))
check_envelopes(envelopes, small, large, full, DRIVER, run, TYPE)

conn.close()
finish(DRIVER)
