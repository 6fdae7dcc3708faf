-- W1 floor: the business row and a bare INSERT of the same message row
\set cid random(1, 100000)
\set amt random(100, 99999)
\set qty random(1, 9)
BEGIN;
INSERT INTO floor.orders (customer_id, amount) VALUES (:cid, :amt / 100.0) RETURNING id \gset
INSERT INTO floor.message (id, topic, event_type, payload)
    VALUES (public.bench_floor_key(nextval('floor.message_seq')), 'orders', 'evt.order.created.v1',
            public.bench_payload(:id, :cid, :amt / 100.0, :qty));
END;
