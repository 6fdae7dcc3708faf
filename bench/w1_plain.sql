-- W1 plain: the business row and the plain outbox's INSERT
\set cid random(1, 100000)
\set amt random(100, 99999)
\set qty random(1, 9)
BEGIN;
INSERT INTO plain.orders (customer_id, amount) VALUES (:cid, :amt / 100.0) RETURNING id \gset
INSERT INTO plain.message (topic, event_type, payload)
    VALUES ('orders', 'evt.order.created.v1', public.bench_payload(:id, :cid, :amt / 100.0, :qty));
END;
