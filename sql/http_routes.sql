--
-- http_routes: route_http, rotate_http_secret and webhook_signature check
-- every argument; a refused route stores nothing.  Where the design names
-- the message of an error it is shown, otherwise only its SQLSTATE; of a
-- refused scheme, whether the detail names it; of a refused secret,
-- whether there is a hint.  The secret itself is readable by the
-- extension's owner only: outbox.routes shows its fingerprint.
--
SELECT regress.reset();
TRUNCATE outbox.routes;
SET TimeZone = 'UTC';

-- How a statement fails.
CREATE FUNCTION pg_temp.fails(stmt text, OUT state text, OUT message text,
                              OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    state := 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END
$$;

-- A fingerprint of the routes and their secrets, created_at included.
CREATE FUNCTION pg_temp.routes_state() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(coalesce((SELECT string_agg(r::text, '|' ORDER BY r.topic) FROM outbox.routes r), '')
               || '#' ||
               coalesce((SELECT string_agg(s::text, '|' ORDER BY s.topic) FROM outbox.route_secrets s), ''))
$$;

-- The secret of the Standard Webhooks test vector (a 24-byte key), and
-- whsec_ secrets of n random bytes.
\set vector_secret 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
CREATE FUNCTION pg_temp.secret(n integer) RETURNS text
LANGUAGE sql AS $$
    SELECT 'whsec_' || translate(encode(decode(string_agg(lpad(to_hex((random() * 255)::int), 2, '0'), ''), 'hex'), 'base64'), E'\n', '')
      FROM generate_series(1, n)
$$;

--
-- The tables
--
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute WHERE attrelid = 'outbox.routes'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute WHERE attrelid = 'outbox.route_secrets'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute WHERE attrelid = 'outbox.route_http_stats'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;
-- the secrets are dumped with the database, and granted to nobody
SELECT 'outbox.route_secrets'::regclass = ANY (extconfig) AS secrets_dumped
  FROM pg_extension WHERE extname = 'krizaka_outbox';
SELECT count(*) AS grants_on_secrets
  FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
 WHERE c.oid = 'outbox.route_secrets'::regclass AND a.grantee <> c.relowner;
-- an http route needs its url, and no channel, server or command
SELECT state FROM pg_temp.fails($$INSERT INTO outbox.routes (topic, target) VALUES ('x', 'http')$$);
SELECT state FROM pg_temp.fails($$INSERT INTO outbox.routes (topic, target, url, channel) VALUES ('x', 'http', 'http://example.com/', 'c')$$);

--
-- route_http
--
SELECT outbox.route_http('orders', 'https://hooks.example.com/outbox?tenant=a', :'vector_secret',
                         '{"Authorization": "Bearer t0ken", "X-Tenant": "acme"}');
SELECT topic, target, url, channel, server, command, ca_file, secret_fingerprint,
       created_by = current_user AS by_me
  FROM outbox.routes;
-- the fingerprint: the first 16 hex digits of the SHA-256 of the key
SELECT secret_fingerprint = left(encode(sha256(decode('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'base64')), 'hex'), 16) AS fingerprint
  FROM outbox.routes WHERE topic = 'orders';
-- the secret and the headers are kept apart, and nowhere in outbox.routes
SELECT topic, secret = :'vector_secret' AS secret, previous_secret, previous_until, headers
  FROM outbox.route_secrets;
SELECT count(*) AS routes_showing_the_secret FROM outbox.routes r WHERE r::text LIKE '%MfKQ9r8G%';

-- a route without a secret or headers
SELECT outbox.route_http('plain', 'http://hooks.example.com/plain');
SELECT topic, url, secret_fingerprint FROM outbox.routes WHERE topic = 'plain';
SELECT topic, secret, previous_secret, headers FROM outbox.route_secrets WHERE topic = 'plain';

-- setting a route again replaces it, whatever its target was
SELECT outbox.route_notify('plain', 'plain_events');
SELECT topic, target, channel, url, secret_fingerprint FROM outbox.routes WHERE topic = 'plain';
SELECT count(*) AS secrets_left FROM outbox.route_secrets WHERE topic = 'plain';
SELECT outbox.route_http('plain', 'http://hooks.example.com/v2', pg_temp.secret(32));
SELECT topic, target, channel, url, secret_fingerprint IS NOT NULL AS signed FROM outbox.routes WHERE topic = 'plain';
SELECT outbox.route_http('plain', 'http://hooks.example.com/v3');
SELECT topic, url, secret_fingerprint FROM outbox.routes WHERE topic = 'plain';
SELECT outbox.unroute('plain');
SELECT count(*) AS secrets_left FROM outbox.route_secrets WHERE topic = 'plain';

-- URLs, secrets and headers that are accepted, stored as given; an address
-- is only checked when a call connects
CREATE TEMP TABLE good (n integer, url text, secret text, headers jsonb);
INSERT INTO good VALUES
    (1, 'http://example.com', NULL, NULL),
    (2, 'https://example.com:8443/a/b?c=d&e=f%20g', NULL, NULL),
    (3, 'http://127.0.0.1:8080/hook', NULL, NULL),
    (4, 'http://[::1]:8080/hook', NULL, NULL),
    (5, 'http://localhost/', NULL, NULL),
    (6, 'https://example.com/', pg_temp.secret(24), NULL),
    (7, 'https://example.com/', pg_temp.secret(64), NULL),
    (8, 'https://example.com/', NULL, '{}'),
    (9, 'https://example.com/', NULL, '{"X-Empty": ""}'),
    (10, 'https://example.com/', NULL, $${"X-Token!#$%&'*+-.^_`|~09": "v a l u e"}$$),
    (11, 'https://example.com/', NULL, '{"Authorization": "Basic dXNlcjpwYXNz", "x-a": "1", "X-B": "é"}');
SELECT n, (pg_temp.fails(format('SELECT outbox.route_http(%L, %L, %L, %L)', 'good ' || n, url, secret, headers))).state
  FROM good ORDER BY n;
SELECT g.n, r.url = g.url AS url_stored,
       s.secret IS NOT DISTINCT FROM g.secret AS secret_stored,
       s.headers IS NOT DISTINCT FROM g.headers AS headers_stored
  FROM good g JOIN outbox.routes r ON r.topic = 'good ' || g.n LEFT JOIN outbox.route_secrets s USING (topic)
 ORDER BY g.n;
DROP TABLE good;

-- refused URLs, secrets and headers: nothing stored, the existing route
-- left as it was
SELECT pg_temp.routes_state() AS before \gset
CREATE TEMP TABLE bad (label text, url text, secret text, headers text, named boolean, mention text);
INSERT INTO bad VALUES
    ('scheme ftp', 'ftp://example.com/hook', NULL, NULL, true, 'ftp'),
    ('scheme file', 'file:///etc/passwd', NULL, NULL, true, 'file'),
    ('scheme gopher', 'gopher://example.com:70/1', NULL, NULL, true, 'gopher'),
    ('no scheme', 'example.com/hook', NULL, NULL, false, NULL),
    ('not a URL', 'not a url', NULL, NULL, false, NULL),
    ('empty', '', NULL, NULL, false, NULL),
    ('no host', 'http://', NULL, NULL, true, NULL),
    ('no host, a path', 'http:///hook', NULL, NULL, true, NULL),
    ('no host, a port', 'https://:8443/hook', NULL, NULL, true, NULL),
    ('user and password', 'https://user:pass@example.com/hook', NULL, NULL, true, NULL),
    ('user', 'https://user@example.com/hook', NULL, NULL, true, NULL),
    ('fragment', 'https://example.com/hook#part', NULL, NULL, true, NULL),
    ('empty fragment', 'https://example.com/hook#', NULL, NULL, true, NULL),
    ('CR LF in the URL', E'https://example.com/hook\r\nX-Evil: 1', NULL, NULL, false, NULL),
    ('space in the URL', 'https://example.com/a hook', NULL, NULL, false, NULL),
    ('too long', 'https://example.com/' || repeat('a', 70000), NULL, NULL, true, NULL),
    ('secret without prefix', 'https://example.com/', 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', NULL, true, NULL),
    ('secret other prefix', 'https://example.com/', 'whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', NULL, true, NULL),
    ('secret empty', 'https://example.com/', '', NULL, true, NULL),
    ('secret prefix only', 'https://example.com/', 'whsec_', NULL, true, NULL),
    ('secret bad base64', 'https://example.com/', 'whsec_MfKQ9r8GKYqrTwjU!!8ILPZIo2LaLaSw', NULL, true, NULL),
    ('secret 23 bytes', 'https://example.com/', pg_temp.secret(23), NULL, true, NULL),
    ('secret 65 bytes', 'https://example.com/', pg_temp.secret(65), NULL, true, NULL),
    ('headers an array', 'https://example.com/', NULL, '["X-A", "b"]', false, NULL),
    ('headers a string', 'https://example.com/', NULL, '"X-A: b"', false, NULL),
    ('headers a number', 'https://example.com/', NULL, '1', false, NULL),
    ('header value a number', 'https://example.com/', NULL, '{"X-A": 1}', false, NULL),
    ('header value null', 'https://example.com/', NULL, '{"X-A": null}', false, NULL),
    ('header value an object', 'https://example.com/', NULL, '{"X-A": {"b": "c"}}', false, NULL),
    ('header value an array', 'https://example.com/', NULL, '{"X-A": ["b"]}', false, NULL),
    ('header value with CR LF', 'https://example.com/', NULL, '{"X-A": "b\r\nX-Evil: 1"}', false, NULL),
    ('header value with LF', 'https://example.com/', NULL, '{"X-A": "b\nX-Evil: 1"}', false, NULL),
    ('header value with CR', 'https://example.com/', NULL, '{"X-A": "b\rX-Evil: 1"}', false, NULL),
    ('header name empty', 'https://example.com/', NULL, '{"": "b"}', false, NULL),
    ('header name with a space', 'https://example.com/', NULL, '{"X A": "b"}', false, NULL),
    ('header name with a colon', 'https://example.com/', NULL, '{"X-A:": "b"}', false, NULL),
    ('header name with CR LF', 'https://example.com/', NULL, '{"X-A\r\nX-Evil": "b"}', false, NULL),
    ('header name with parentheses', 'https://example.com/', NULL, '{"X(A)": "b"}', false, NULL),
    ('header name not ASCII', 'https://example.com/', NULL, '{"X-é": "b"}', false, NULL);
-- every reserved name, in other cases than its own
INSERT INTO bad
SELECT 'reserved ' || h, 'https://example.com/', NULL, jsonb_build_object(h, 'x')::text, true, NULL
  FROM unnest(ARRAY['Content-Type', 'CONTENT-LENGTH', 'Host', 'transfer-encoding', 'Connection',
                    'EXPECT', 'te', 'TE', 'Upgrade', 'webhook-id', 'Webhook-Id', 'WEBHOOK-TIMESTAMP',
                    'Webhook-Signature', 'webhook-signature']) h;
SELECT label, f.state, CASE WHEN named THEN f.message END AS message,
       CASE WHEN mention IS NOT NULL THEN f.detail LIKE '%' || mention || '%' END AS detail_names_scheme,
       CASE WHEN label LIKE 'secret%' THEN f.hint <> '' END AS hint
  FROM bad,
       LATERAL pg_temp.fails(format('SELECT outbox.route_http(%L, %L, %L, %L)', 'orders', url, secret, headers)) f
 ORDER BY label;
SELECT pg_temp.routes_state() = :'before' AS unchanged;
DROP TABLE bad;

--
-- ca_file: a superuser or a member of pg_read_server_files may name one
--
SELECT outbox.route_http('tls', 'https://example.com/', ca_file => '/etc/ssl/certs/ca-certificates.crt');
SELECT topic, url, ca_file FROM outbox.routes WHERE topic = 'tls';
BEGIN;
CREATE ROLE regress_http_router NOLOGIN;
GRANT USAGE ON SCHEMA outbox, regress TO regress_http_router;
GRANT EXECUTE ON FUNCTION outbox.route_http(text, text, text, jsonb, text) TO regress_http_router;
SET ROLE regress_http_router;
SELECT outbox.route_http('router', 'https://example.com/mine', pg_temp.secret(32));
SELECT state, message FROM pg_temp.fails($$SELECT outbox.route_http('router', 'https://example.com/', ca_file => '/etc/ssl/certs/ca-certificates.crt')$$);
RESET ROLE;
SELECT topic, url, ca_file, created_by = 'regress_http_router' AS by_router FROM outbox.routes WHERE topic = 'router';
GRANT pg_read_server_files TO regress_http_router;
SET ROLE regress_http_router;
SELECT state FROM pg_temp.fails($$SELECT outbox.route_http('router', 'https://example.com/', ca_file => '/etc/ssl/certs/ca-certificates.crt')$$);
RESET ROLE;
SELECT topic, ca_file FROM outbox.routes WHERE topic = 'router';
ROLLBACK;

--
-- rotate_http_secret
--
SELECT outbox.route_http('rot', 'https://example.com/rot', :'vector_secret');
SELECT secret_fingerprint AS old_fingerprint FROM outbox.routes WHERE topic = 'rot' \gset
SELECT pg_temp.secret(48) AS new_secret \gset
BEGIN;
SELECT outbox.rotate_http_secret('rot', :'new_secret');
SELECT secret_fingerprint <> :'old_fingerprint' AS changed,
       secret_fingerprint = left(encode(sha256(decode(substr(:'new_secret', 7), 'base64')), 'hex'), 16) AS new_fingerprint
  FROM outbox.routes WHERE topic = 'rot';
SELECT secret = :'new_secret' AS new_signs, previous_secret = :'vector_secret' AS old_kept,
       previous_until - now() AS kept_for
  FROM outbox.route_secrets WHERE topic = 'rot';
COMMIT;
BEGIN;
SELECT outbox.rotate_http_secret('rot', pg_temp.secret(24), interval '1 hour');
SELECT previous_secret = :'new_secret' AS previous_kept, previous_until - now() AS kept_for
  FROM outbox.route_secrets WHERE topic = 'rot';
COMMIT;
-- refused: no HTTP route, a bad secret; nothing changes
SELECT outbox.route_notify('notified', 'notified_events');
SELECT pg_temp.routes_state() AS before \gset
SELECT v.label, f.state, CASE WHEN v.named THEN f.message END AS message
  FROM (VALUES ('no route', 'nowhere', pg_temp.secret(32), false),
               ('a NOTIFY route', 'notified', pg_temp.secret(32), false),
               ('bad secret', 'rot', 'whsec_short', true),
               ('secret without prefix', 'rot', 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', true)) AS v(label, topic, secret, named),
       LATERAL pg_temp.fails(format('SELECT outbox.rotate_http_secret(%L, %L)', v.topic, v.secret)) f
 ORDER BY v.label;
SELECT pg_temp.routes_state() = :'before' AS unchanged;

--
-- HTTP routes per subscription: each route of a topic has its own secret
-- and headers; rotating or removing one leaves the others as they were
--
SELECT outbox.route_http('subs', 'https://example.com/default', :'vector_secret');
SELECT outbox.route_http('subs', 'https://example.com/search', :'new_secret', '{"X-Sub": "search"}', NULL, 'search');
SELECT outbox.route_http('subs', 'https://example.com/billing', NULL, NULL, NULL, 'billing');
SELECT coalesce(r.subscription, '(default)') AS subscription, r.url,
       s.secret IS NOT NULL AS signed, s.headers
  FROM outbox.routes r
  LEFT JOIN outbox.route_secrets s
         ON s.topic = r.topic AND s.subscription IS NOT DISTINCT FROM r.subscription
 WHERE r.topic = 'subs' ORDER BY r.subscription NULLS FIRST;
SELECT name FROM outbox.subscription WHERE topic = 'subs' ORDER BY name;
SELECT outbox.rotate_http_secret('subs', pg_temp.secret(32), interval '1 hour', 'search');
SELECT coalesce(subscription, '(default)') AS subscription, previous_secret IS NOT NULL AS old_kept
  FROM outbox.route_secrets WHERE topic = 'subs' ORDER BY subscription NULLS FIRST;
SELECT state, message FROM pg_temp.fails(
    $$SELECT outbox.rotate_http_secret('subs', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', interval '1 hour', 'billing')$$);
SELECT state, message FROM pg_temp.fails(
    $$SELECT outbox.rotate_http_secret('subs', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', interval '1 hour', 'audit')$$);
SELECT outbox.unroute('subs', 'search');
SELECT coalesce(subscription, '(default)') AS subscription FROM outbox.route_secrets
 WHERE topic = 'subs' ORDER BY subscription NULLS FIRST;
SELECT outbox.route_notify('subs', 'subs_events');
SELECT count(*) AS default_secrets FROM outbox.route_secrets WHERE topic = 'subs';
SELECT coalesce(subscription, '(default)') AS subscription, target FROM outbox.routes
 WHERE topic = 'subs' ORDER BY subscription NULLS FIRST;
SELECT outbox.unroute('subs', 'billing'), outbox.unroute('subs');
SELECT outbox.unsubscribe('subs', name) FROM outbox.subscription WHERE topic = 'subs' ORDER BY name;

--
-- webhook_signature: the published test vector, and what it refuses
--
SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_p5jXN8AQM9LWM0D4loKWxJek',
                                1614265330, '{"test": 2432232314}');
SELECT v.arg, f.state, f.message
  FROM (VALUES ('secret', $$SELECT outbox.webhook_signature(NULL, 'msg', 1, 'body')$$),
               ('msg_id', $$SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', NULL, 1, 'body')$$),
               ('ts', $$SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg', NULL, 'body')$$),
               ('body', $$SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg', 1, NULL)$$)) AS v(arg, stmt),
       pg_temp.fails(v.stmt) AS f;
SELECT provolatile, proisstrict FROM pg_proc WHERE oid = 'outbox.webhook_signature(text, text, bigint, text)'::regprocedure;
SELECT state, message FROM pg_temp.fails($$SELECT outbox.webhook_signature('whsec_short', 'msg', 1, 'body')$$);

--
-- The secrets stay with the extension's owner: a role that may read
-- outbox.routes sees the fingerprint, never the secret
--
BEGIN;
CREATE ROLE regress_http_reader NOLOGIN;
GRANT USAGE ON SCHEMA outbox TO regress_http_reader;
GRANT SELECT ON outbox.routes TO regress_http_reader;
SET ROLE regress_http_reader;
SELECT topic, secret_fingerprint IS NOT NULL AS fingerprint FROM outbox.routes WHERE topic IN ('orders', 'rot') ORDER BY topic;
SELECT state, message FROM pg_temp.fails('SELECT * FROM outbox.route_secrets');
SELECT state, message FROM pg_temp.fails('SELECT secret FROM outbox.route_secrets');
RESET ROLE;
ROLLBACK;

TRUNCATE outbox.routes, outbox.route_secrets;
RESET TimeZone;
