-- W1 krizaka keyed: the business row and outbox.append with the customer as
-- ordering key
\set cid random(1, 100000)
\set amt random(100, 99999)
\set qty random(1, 9)
BEGIN;
INSERT INTO krizaka.orders (customer_id, amount) VALUES (:cid, :amt / 100.0) RETURNING id \gset
SELECT outbox.append('orders', 'evt.order.created.v1',
                     public.bench_payload(:id, :cid, :amt / 100.0, :qty),
                     ordering_key => 'customer:' || :cid);
END;
