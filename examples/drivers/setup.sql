-- The database the driver programs run in (as a superuser, once):
--   psql -d drivers -f examples/drivers/setup.sql
-- The background worker must deliver for this database
-- (outbox.worker_databases = 'drivers', or '*').
CREATE EXTENSION IF NOT EXISTS krizaka_outbox;

-- The business table: each program inserts its order and appends its event
-- in the same transaction.
CREATE TABLE IF NOT EXISTS public.shop_order (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    driver text NOT NULL,
    item text NOT NULL
);

-- The live topic goes to a NOTIFY channel; each program's pull topic
-- (shop.<driver>.<random>) has no route, so only the program claims it.
SELECT outbox.route_notify('shop.live', 'shop_events');
