# Failover to a streaming standby.  While the standby is in recovery,
# worker_status() shows its database in state standby and the write
# functions fail with 25006.  Messages committed on the primary, some
# delivered there and some leased by a claimer that dies with it, survive
# an immediate stop of the primary; once the standby is promoted its own
# worker starts, honours the dead primary's leases until they end, then
# delivers every message that was not delivered, exactly once: to a remote
# route and to a listener connected to the promoted server.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $lease = 20;    # long enough to promote and reconnect within it

my ($primary, $standby, $target) = replicated_outbox();

# 1. Delivered on the primary.
$primary->safe_psql('app', q{
	SELECT outbox.append(t, 'evt.test.v1', jsonb_build_object('before', g))
	  FROM unnest(ARRAY['n', 'r']) t, generate_series(1, 2) g;
});
ok($primary->poll_query_until('app',
		q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}, '0'),
	'the primary delivers what is due');

# 2. Committed, and leased by a claimer of the primary that will not come back
# (naming the routed topics: a claim across all topics skips them).  Each
# topic's claim takes its own clock reading, so the leases of 'n' end a
# little before those of 'r': each topic is checked against its own.
my %leased_until = split /[|\n]/, $primary->safe_psql('app', qq{
	BEGIN;
	SELECT count(*) FROM (SELECT outbox.append(t, 'evt.test.v1', jsonb_build_object('leased', g))
	                        FROM unnest(ARRAY['n', 'r']) t, generate_series(1, 3) g) s \\g /dev/null
	SELECT t, max(c.leased_until) FROM unnest(ARRAY['n', 'r']) t,
	       LATERAL outbox.claim('dead-primary', t, 100, $lease) c GROUP BY t ORDER BY t;
	COMMIT;
});
$primary->wait_for_catchup($standby);

# 3. The standby in recovery.
is($standby->safe_psql('postgres',
		q{SELECT string_agg(datname || '|' || state || '|' || (pid IS NULL), ',') FROM outbox.worker_status()}),
	'app|standby|true', 'worker_status() shows the database it will serve, in state standby');
is($standby->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'krizaka_outbox%'}),
	'0', 'no launcher and no worker run on the standby');
for my $call ("outbox.append('r', 'evt.test.v1', '{}')",
	"outbox.claim('x', 'r')",
	"outbox.route_notify('x', 'x')")
{
	my ($rc, $out, $err) = $standby->psql('app', "\\set VERBOSITY verbose\nSELECT $call");
	like($err, qr/ERROR:  25006: cannot execute/, "$call on the standby fails with 25006");
}

# 4. The primary dies; the standby is promoted and its worker starts.
$primary->stop('immediate');
$standby->promote;
my $listener = $standby->background_psql('app');
$listener->query_safe('LISTEN events');
ok($standby->poll_query_until('postgres',
		q{SELECT state IN ('running', 'sleeping') AND pid IS NOT NULL FROM outbox.worker_status() WHERE datname = 'app'}),
	'after the promotion the worker runs');
is($standby->safe_psql('app',
		q{SELECT count(*) || '/' || count(*) FILTER (WHERE delivered_at IS NULL) FROM outbox.message}),
	'10/6', 'every committed message is there, the six leased ones undelivered');

# 5. Every message is delivered once the leases end, exactly once.
ok($standby->poll_query_until('app',
		q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}, '0'),
	'the promoted server delivers every message');
my $leases = "VALUES ('n', '$leased_until{n}'::timestamptz), ('r', '$leased_until{r}')";
is($standby->safe_psql('app', qq{
		SELECT bool_and(m.delivered_at >= l.until) || '/' || min(m.attempts) || '/' || max(m.attempts)
		  FROM outbox.message m JOIN ($leases) l(topic, until) USING (topic)
		 WHERE m.payload ? 'leased'}),
	'true/2/2', 'the dead primary\'s leases were honoured until they ended, then claimed again')
  or diag($standby->safe_psql('app', qq{
		SELECT m.topic, m.attempts, m.delivered_at, l.until, m.last_error
		  FROM outbox.message m JOIN ($leases) l(topic, until) USING (topic)
		 WHERE m.payload ? 'leased' ORDER BY m.seq}));
is($target->safe_psql('postgres', q{SELECT count(*) || '/' || count(DISTINCT id) FROM received}),
	'5/5', 'five remote rows, one per remote message');
is($target->safe_psql('postgres', qq{SELECT count(*) FROM received WHERE at >= '$leased_until{r}'}),
	'3', 'the three leased ones after their lease');
is($target->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM received'),
	$standby->safe_psql('app',
		q{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox.message WHERE topic = 'r'}),
	'they are the remote messages');

my $heard = '';
my @ids = notified_ids($listener, \$heard, 3);
is(join(',', sort @ids),
	$standby->safe_psql('app',
		q{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox.message WHERE topic = 'n' AND payload ? 'leased'}),
	'the listener of the promoted server hears each leased NOTIFY message once');

$listener->quit;
$standby->stop;
$target->stop;
done_testing();
