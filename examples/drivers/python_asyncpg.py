#!/usr/bin/python3
"""krizaka_outbox from asyncpg (Debian: python3-asyncpg).

The steps and the checks of the README's "Drivers" chapter, against a
database prepared by setup.sql, through the libpq environment (PGHOST,
PGPORT, PGUSER, PGDATABASE).
"""
import asyncio
import json
import secrets
import uuid
from datetime import datetime, timedelta, timezone

import asyncpg

from checks import check, check_envelopes, finish

DRIVER = "asyncpg"
TYPE = "evt.shop.order_placed.v1"
OWNER = f"{DRIVER}-worker-1"


class Rollback(Exception):
    pass


async def main():
    run = secrets.token_hex(4)
    topic = f"shop.{DRIVER}.{run}"
    # asyncpg sends parameters with the types the server describes.  Without
    # a codec, a jsonb parameter is JSON text (json.dumps) and a jsonb column
    # comes back as JSON text (json.loads): every JSON value, null included.
    conn = await asyncpg.connect()
    # A server zone far from UTC shows what a naive datetime does.
    await conn.execute("SET TimeZone = 'Asia/Tokyo'")

    # 1. The business row and its events commit together.
    payloads = [{"item": "lamp", "qty": 2}, None, [1, 2, 3], "gift wrap"]
    later = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
    given_id = uuid.uuid4()
    async with conn.transaction():
        await conn.execute("INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)",
                           DRIVER, f"lamp-{run}")
        ids = [await conn.fetchval("SELECT outbox.append($1, $2, $3)", topic, TYPE, json.dumps(p))
               for p in payloads]
        ids.append(await conn.fetchval("SELECT outbox.append($1, $2, $3, $4)",
                                       topic, TYPE, json.dumps({"item": "desk"}), given_id))
        payloads.append({"item": "desk"})
        # append_batch: a list of JSON texts for jsonb[]
        batch = [{"item": "pen"}, None]
        ids += [r[0] for r in await conn.fetch("SELECT * FROM outbox.append_batch($1, $2, $3)",
                                               topic, TYPE, [json.dumps(p) for p in batch])]
        payloads += batch
        # available_at: an aware datetime is exact whatever the server's zone
        delayed_id = await conn.fetchval(
            "SELECT outbox.append($1, $2, $3, available_at => $4)",
            topic, TYPE, json.dumps({"item": "later"}), later)
    check("append returns a UUID", all(isinstance(i, uuid.UUID) for i in ids), True)
    check("append keeps the given id", ids[4], given_id)
    check("aware available_at stored exactly",
          await conn.fetchval("SELECT available_at FROM outbox.message WHERE id = $1", delayed_id),
          later)
    # asyncpg takes a naive datetime for a timestamptz as UTC (not the
    # server's zone, not the client's): datetime.now() would be off by the
    # client's offset.
    naive = later.replace(tzinfo=None)
    check("naive datetime taken as UTC",
          await conn.fetchval("SELECT $1::timestamptz", naive), later)

    # 2. A rolled-back business transaction leaves no row and no message.
    rolled_id = uuid.uuid4()
    try:
        async with conn.transaction():
            await conn.execute("INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)",
                               DRIVER, f"umbrella-{run}")
            await conn.execute("SELECT outbox.append($1, $2, $3, $4)",
                               topic, TYPE, json.dumps({"item": "umbrella"}), rolled_id)
            raise Rollback()
    except Rollback:
        pass
    check("rolled back: no message",
          await conn.fetchval("SELECT count(*) FROM outbox.message WHERE id = $1", rolled_id), 0)
    check("rolled back: no business row",
          await conn.fetchval("SELECT count(*) FROM public.shop_order WHERE item = $1",
                              f"umbrella-{run}"), 0)

    # Pitfalls.  None is SQL NULL, not JSON null.  With the usual jsonb codec
    # (encoder=json.dumps) pass Python values: JSON text would be encoded
    # again and stored as one JSON string.
    try:
        await conn.execute("SELECT outbox.append($1, $2, $3)", topic, TYPE, None)
        check("None instead of 'null' fails", "no error", "22004")
    except asyncpg.PostgresError as exc:
        check("None instead of 'null' fails", exc.sqlstate, "22004")
    coded = await asyncpg.connect()
    await coded.set_type_codec("jsonb", schema="pg_catalog",
                               encoder=json.dumps, decoder=json.loads)
    check("codec: a dict is an object",
          await coded.fetchval("SELECT jsonb_typeof($1::jsonb)", {"item": "lamp"}), "object")
    check("codec: JSON text is double-encoded",
          await coded.fetchval("SELECT jsonb_typeof($1::jsonb)", '{"item": "lamp"}'), "string")
    await coded.close()

    # 3. Claim: a Python int for batch_size, rows oldest first.
    rows = await conn.fetch("SELECT id, payload, attempts FROM outbox.claim($1, $2, $3)",
                            OWNER, topic, 10)
    check("claim: the due messages in order", [r["id"] for r in rows], ids)
    check("claim: payloads as appended", [json.loads(r["payload"]) for r in rows], payloads)
    check("claim: first attempt", {r["attempts"] for r in rows}, {1})

    # 4. complete_many with a list of UUIDs (uuid[]); fail the last one.
    check("complete_many", await conn.fetchval("SELECT outbox.complete_many($1, $2)",
                                               [r["id"] for r in rows[:-1]], OWNER),
          len(rows) - 1)
    check("fail", await conn.fetchval("SELECT outbox.fail($1, $2, $3)",
                                      rows[-1]["id"], OWNER, "HTTP 503 from the shipping service"),
          True)
    check("failed message backs off with its error",
          tuple(await conn.fetchrow("SELECT attempts, last_error, available_at > now() "
                                    "FROM outbox.message WHERE id = $1", rows[-1]["id"])),
          (1, "HTTP 503 from the shipping service", True))

    # 5. consume_once in the effect's transaction: true once, then false.
    async def consume(message_id):
        async with conn.transaction():
            return await conn.fetchval("SELECT outbox.consume_once($1, $2)", "mailer", message_id)

    check("consume_once first", await consume(ids[0]), True)
    check("consume_once again", await consume(ids[0]), False)

    # 6. topic_stats: counts are bigint (int), the age an interval (timedelta).
    stats = await conn.fetchrow("SELECT due, delayed, leased, dead, delivered, oldest_undelivered_age "
                                "FROM outbox.topic_stats WHERE topic = $1", topic)
    check("topic_stats counts", tuple(stats)[:5], (0, 2, 0, 0, len(rows) - 1))
    check("topic_stats age is a timedelta",
          isinstance(stats[5], timedelta) and stats[5] >= timedelta(0), True)

    # 7. The pull worker's loop: complete_and_claim completes the batch just
    #    delivered and claims the next in one call and one commit.
    loop = f"{topic}.loop"
    async with conn.transaction():
        first = await conn.fetchval("SELECT outbox.append($1, $2, $3)", loop, TYPE, json.dumps({"n": 1}))
        second = await conn.fetchval("SELECT outbox.append($1, $2, $3)", loop, TYPE, json.dumps({"n": 2}))
    batch = [r["id"] for r in await conn.fetch("SELECT id FROM outbox.claim($1, $2, $3)", OWNER, loop, 1)]
    check("claim one", batch, [first])
    batch = [r["id"] for r in await conn.fetch("SELECT id FROM outbox.complete_and_claim($1, $2, $3, $4)",
                                               batch, OWNER, loop, 10)]
    check("complete_and_claim: the next batch", batch, [second])
    check("complete_many: the last batch",
          await conn.fetchval("SELECT outbox.complete_many($1, $2)", batch, OWNER), 1)
    check("loop: both delivered",
          await conn.fetchval("SELECT count(*) FROM outbox.message WHERE topic = $1 AND delivered_at IS NOT NULL",
                              loop), 2)

    # 8. LISTEN on the channel of the route of 'shop.live'; the background
    #    worker notifies after the commit.  A notification over 8000 bytes
    #    comes without its payload and with "truncated": true: fetch it with
    #    envelope_by_id.
    listener = await asyncpg.connect()
    arrived = asyncio.Queue()
    await listener.add_listener("shop_events",
                                lambda _conn, _pid, _channel, payload: arrived.put_nowait(payload))
    async with conn.transaction():
        await conn.execute("INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)",
                           DRIVER, f"chair-{run}")
        small = str(await conn.fetchval("SELECT outbox.append('shop.live', $1, $2)",
                                        TYPE, json.dumps({"driver": DRIVER, "run": run})))
        large = str(await conn.fetchval("SELECT outbox.append('shop.live', $1, $2)",
                                        TYPE, json.dumps({"driver": DRIVER, "note": "x" * 9000})))
    envelopes = {}

    async def receive():
        while len(envelopes) < 2:
            envelope = json.loads(await arrived.get())
            if envelope["id"] in (small, large):
                envelopes[envelope["id"]] = envelope

    try:
        await asyncio.wait_for(receive(), timeout=30)
    except asyncio.TimeoutError:
        pass
    await listener.close()
    full = json.loads(await conn.fetchval("SELECT outbox.envelope_by_id($1)", uuid.UUID(large)))
    check_envelopes(envelopes, small, large, full, DRIVER, run, TYPE)
    await conn.close()


asyncio.run(main())
finish(DRIVER)
