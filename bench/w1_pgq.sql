-- W1 pgq: the business row and pgq.insert_event
\set cid random(1, 100000)
\set amt random(100, 99999)
\set qty random(1, 9)
BEGIN;
INSERT INTO pgqapp.orders (customer_id, amount) VALUES (:cid, :amt / 100.0) RETURNING id \gset
SELECT pgq.insert_event('orders', 'evt.order.created.v1',
                        public.bench_payload(:id, :cid, :amt / 100.0, :qty)::text);
END;
