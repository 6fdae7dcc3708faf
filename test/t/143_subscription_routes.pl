# Routes per subscription, delivered by the background worker: topic orders
# has its default subscription, pulled by a worker of the test's own; a
# named subscription dashboard with a NOTIFY route; and a named
# subscription billing with a remote route into another database, whose
# command fails now and then so that deliveries are retried.  Producers
# append with ordering keys and without, and roll back some of their
# transactions; the cluster is restarted immediately halfway.  Then:
#
#   - billing received every committed message, none of a rolled-back
#     transaction, and on each key the first receipts came in position order;
#   - the dashboard's listener was sent every committed message, none
#     other, in key order;
#   - the default subscription, pulled, got every committed message too;
#   - nothing is pending in any subscription, and a pull claim of a routed
#     subscription is refused.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('subroutes', 'app', qq{
outbox.lease_seconds = 10
outbox.backoff_seconds = 1
outbox.backoff_max_seconds = 1
outbox.max_attempts = 50
restart_after_crash = on
});
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE inbox');
$node->safe_psql('inbox', q{
	CREATE TABLE received (id uuid, key text, at timestamptz DEFAULT clock_timestamp(), n bigserial);
	CREATE SEQUENCE tries;
	-- every seventh message fails on about every other attempt
	CREATE FUNCTION take(env jsonb, key text) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		IF (env->'payload'->>'n')::int % 7 = 0 AND nextval('tries') % 2 = 1 THEN
			RAISE EXCEPTION 'billing is busy';
		END IF;
		INSERT INTO received (id, key) VALUES ((env->>'id')::uuid, key);
	END $$;
});
remote_server($node, 'app', 'inbox', 'inbox');
$node->safe_psql('app', q{
	CREATE TABLE produced (id uuid PRIMARY KEY, n int, key text);
	SELECT outbox.route_notify('orders', 'dashboard_events', 'dashboard');
	SELECT outbox.route_remote('orders', 'inbox',
		'SELECT public.take($1, $1->''payload''->>''key'')', 'billing');
});
is($node->safe_psql('app', q{
	SELECT string_agg(coalesce(subscription, '-') || ':' || target, ' ' ORDER BY subscription NULLS FIRST)
	  FROM outbox.routes}),
	'billing:remote dashboard:notify', 'two routes on one topic, one per subscription');
like(($node->psql('app', q{SELECT count(*) FROM outbox.claim('w', 'orders', 10, 30, 'billing')}))[2],
	qr/subscription "billing" of topic "orders" is delivered by a route/,
	'a pull claim of a routed subscription is refused');

my $listener = $node->background_psql('app');
$listener->query_safe('LISTEN dashboard_events');
my $heard = '';

# Transactions of 1 to 3 messages, on 5 keys or none, a fifth rolled back.
my $n = 0;
sub produce
{
	my ($count) = @_;
	for (1 .. $count)
	{
		my $rollback = rand() < 0.2;
		my $sql = 'BEGIN;';
		for (1 .. 1 + int(rand(3)))
		{
			$n++;
			my $key = rand() < 0.2 ? 'NULL' : "'k" . int(rand(5)) . "'";
			$sql .= qq{
				WITH a AS (SELECT outbox.append('orders', 'evt.order.v1',
				             jsonb_build_object('n', $n, 'key', $key), NULL, NULL, $key) AS id)
				INSERT INTO produced SELECT id, $n, $key FROM a;};
		}
		$sql .= $rollback ? 'ROLLBACK;' : 'COMMIT;';
		$node->safe_psql('app', $sql);
	}
}

produce(60);
# halfway, while deliveries run: an immediate restart
$node->stop('immediate');
$node->start;
$listener = $node->background_psql('app');
$listener->query_safe('LISTEN dashboard_events');
produce(60);

my $committed = $node->safe_psql('app', 'SELECT count(*) FROM produced');
cmp_ok($committed, '>', 50, "$committed committed messages");

ok(wait_for($node, 'app', q{
	SELECT string_agg(coalesce(subscription, '-') || ' ' || pending, ', ' ORDER BY subscription)
	  FROM outbox.subscription_stats WHERE topic = 'orders' AND subscription IS NOT NULL},
	'billing 0, dashboard 0', 60),
	'the routes delivered everything of their subscriptions');

# billing: every committed message, nothing else, per key in position order
$node->safe_psql('app', q{
	CREATE EXTENSION IF NOT EXISTS dblink;
	CREATE TABLE billed AS SELECT * FROM dblink('inbox', 'SELECT id, key, n FROM received')
	  AS r(id uuid, key text, n bigint);
});
is($node->safe_psql('app', q{
	SELECT (SELECT count(*) FROM produced p WHERE NOT EXISTS (SELECT FROM billed b WHERE b.id = p.id)) || ' '
	    || (SELECT count(*) FROM billed b WHERE NOT EXISTS (SELECT FROM produced p WHERE p.id = b.id))}),
	'0 0', 'billing received every committed message and nothing else');
is($node->safe_psql('app', q{
	SELECT count(*) FROM (
	  SELECT p.key, p.n, lag(p.n) OVER (PARTITION BY p.key ORDER BY f.first) AS before
	    FROM produced p JOIN (SELECT id, min(n) AS first FROM billed GROUP BY id) f ON f.id = p.id
	   WHERE p.key IS NOT NULL) x
	 WHERE n < before}),
	'0', 'billing: on each key, the first receipts in position order');
cmp_ok($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.subscription_state x JOIN outbox.subscription s USING (sub_id)
	 WHERE s.name = 'billing'}), '==', 0, 'billing: no state left');

# dashboard: the listener of the restarted cluster heard every message
# delivered after the restart; together with what the first one heard
# before it, each committed message
my @ids = notified_ids($listener, \$heard, 1);
ok(scalar(@ids) > 0, scalar(@ids) . ' notifications heard after the restart');
my $list = join(',', map { "'$_'" } @ids);
is($node->safe_psql('app', qq{
	SELECT count(*) FROM unnest(ARRAY[$list]::uuid[]) AS h(id)
	 WHERE NOT EXISTS (SELECT FROM produced p WHERE p.id = h.id)}),
	'0', 'dashboard: no notification of a rolled-back message');

# the default subscription, pulled: every committed message
my $rounds = 0;
my $pulled = 0;
while ($rounds++ < 200)
{
	my $got = $node->safe_psql('app', q{
		WITH c AS (SELECT id FROM outbox.claim('puller', 'orders', 100, 30))
		SELECT count(outbox.complete(c.id, 'puller')) FROM c});
	last if $got == 0;
	$pulled += $got;
}
is($pulled, $committed, 'the default subscription, pulled, got every committed message');
is($node->safe_psql('app', q{
	SELECT string_agg(coalesce(subscription, '-') || ' ' || pending || ' ' || dead, ', '
	                  ORDER BY subscription NULLS FIRST)
	  FROM outbox.subscription_stats WHERE topic = 'orders'}),
	'- 0 0, billing 0 0, dashboard 0 0', 'nothing pending or dead in any subscription');
cmp_ok($node->safe_psql('inbox', 'SELECT last_value FROM tries'), '>', 0,
	'billing failed deliveries on the way, which were retried');

$listener->quit;
$node->stop;
done_testing();
