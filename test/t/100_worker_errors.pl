# The drain worker survives its own errors: a user trigger on outbox.message
# that raises for one topic's rows costs that topic alone.  A NOTIFY topic
# and a remote topic keep delivering within 3 s with the same worker pid;
# the bad topic's messages end dead after max_attempts with the trigger's
# error as last_error, and so do those of a remote topic whose completion
# the trigger refuses.  An error of a remote claim and an error at commit
# (a deferred trigger: the path a full NOTIFY queue takes, which cannot be
# reached in a test on 15) are recorded on the route and pause it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('errors');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 60000
outbox.lease_seconds = 10
outbox.backoff_seconds = 1
outbox.backoff_max_seconds = 2
outbox.max_attempts = 3
});
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($host, $port) = ($node->host, $node->port);
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE near');
$node->safe_psql('near', 'CREATE TABLE received (id uuid PRIMARY KEY, topic text)');
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER near FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'near');
	CREATE USER MAPPING FOR $su SERVER near OPTIONS (user '$su');
	SELECT outbox.route_notify('good', 'good_events');
	SELECT outbox.route_notify('bad', 'bad_events');
	SELECT outbox.route_notify('late', 'late_events');
	SELECT outbox.route_remote('rem', 'near',
		'INSERT INTO public.received (id, topic) VALUES ((\$1->>''id'')::uuid, \$2)');
	SELECT outbox.route_remote('remdone', 'near',
		'INSERT INTO public.received (id, topic) VALUES ((\$1->>''id'')::uuid, \$2) ON CONFLICT (id) DO NOTHING');
	SELECT outbox.route_remote('badrem', 'near',
		'INSERT INTO public.received (id, topic) VALUES ((\$1->>''id'')::uuid, \$2)');

	-- marking a 'bad' message delivered raises; so does leasing a 'badrem' one
	CREATE FUNCTION public.poison() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
		IF NEW.topic = 'bad' AND NEW.delivered_at IS NOT NULL THEN
			RAISE EXCEPTION 'poisoned message %', NEW.id;
		END IF;
		IF NEW.topic = 'remdone' AND NEW.delivered_at IS NOT NULL THEN
			RAISE EXCEPTION 'completion refused';
		END IF;
		IF NEW.topic = 'badrem' AND NEW.leased_until IS NOT NULL THEN
			RAISE EXCEPTION 'remote claim refused';
		END IF;
		RETURN NEW;
	END \$\$;
	CREATE TRIGGER poison BEFORE UPDATE ON outbox.message
		FOR EACH ROW EXECUTE FUNCTION public.poison();

	-- a 'late' message marked delivered makes the commit fail
	CREATE FUNCTION public.at_commit() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
		RAISE EXCEPTION 'refused at commit';
	END \$\$;
	CREATE CONSTRAINT TRIGGER at_commit AFTER UPDATE ON outbox.message
		DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW WHEN (NEW.topic = 'late' AND NEW.delivered_at IS NOT NULL)
		EXECUTE FUNCTION public.at_commit();
});
my $worker_pid = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'};
ok($node->poll_query_until('app', "SELECT count(*) = 1 FROM ($worker_pid) w"),
	'the worker of app runs');
my $pid = $node->safe_psql('app', $worker_pid);

# The bad topics get their messages first, then the good ones theirs.
$node->safe_psql('app', q{
	SELECT outbox.append('bad', 'evt', pg_catalog.jsonb_build_object('n', i)) FROM generate_series(1, 5) i;
	SELECT outbox.append('badrem', 'evt', '{}');
	SELECT outbox.append('remdone', 'evt', '{}') FROM generate_series(1, 2);
	SELECT outbox.append('late', 'evt', '{}');
});

# While the bad topics fail, the good ones deliver within 3 s, round after round.
for my $i (1 .. 5)
{
	$node->safe_psql('app', q{SELECT outbox.append('good', 'evt', '{}')});
	my $id = $node->safe_psql('app', q{SELECT outbox.append('rem', 'evt', '{}')});
	my $start = time();
	my $ok = 0;
	while (time() - $start < 3)
	{
		my $n = $node->safe_psql('app',
			q{SELECT count(*) FROM outbox.message WHERE topic IN ('good', 'rem') AND delivered_at IS NULL});
		if ($n eq '0') { $ok = 1; last; }
		usleep(20_000);
	}
	ok($ok, "good NOTIFY and remote topics deliver within 3 s while others fail ($i)");
	is($node->safe_psql('near', "SELECT count(*) FROM received WHERE id = '$id'"), '1',
		"the remote message arrived ($i)");
	usleep(300_000);
}

# The poisoned messages end dead with the trigger's error, each after max_attempts.
ok($node->poll_query_until('app', q{
	SELECT count(*) = 5 FROM outbox.message
	 WHERE topic = 'bad' AND dead_at IS NOT NULL AND attempts = 3
	   AND last_error LIKE 'P0001: poisoned message %'}),
	'each poisoned message ends dead after max_attempts with the trigger\'s error')
  or diag($node->safe_psql('app', q{SELECT attempts, dead_at, last_error FROM outbox.message WHERE topic = 'bad'}));
ok($node->poll_query_until('app', q{
	SELECT count(*) = 2 FROM outbox.message
	 WHERE topic = 'remdone' AND dead_at IS NOT NULL AND attempts = 3
	   AND last_error LIKE 'P0001: completion refused%'}),
	'a remote batch whose outcome a trigger refuses: its messages end dead with that error')
  or diag($node->safe_psql('app', q{SELECT attempts, dead_at, last_error FROM outbox.message WHERE topic = 'remdone'}));
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic = 'bad' AND delivered_at IS NOT NULL}),
	'0', 'no poisoned message counts as delivered');

# An error of the remote claim and one at commit are the route's: recorded and paused.
ok($node->poll_query_until('app', q{
	SELECT count(*) = 2 FROM outbox.routes
	 WHERE (topic = 'badrem' AND last_failure LIKE 'P0001: remote claim refused%')
	    OR (topic = 'late' AND last_failure LIKE 'P0001: refused at commit%')}),
	'errors of a remote claim and of a commit are kept as the route\'s last_failure');
ok($node->poll_query_until('app', q{
	SELECT bool_and(consecutive_failures >= 2) FROM outbox.routes WHERE topic IN ('badrem', 'late')}),
	'the route counts its failures in a row');
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.topic_stats WHERE topic IN ('badrem', 'late') AND paused_until IS NOT NULL}),
	'2', 'topic_stats shows both routes paused');
is($node->safe_psql('app', q{
	SELECT attempts || ' ' || (dead_at IS NULL) || ' ' || (delivered_at IS NULL) FROM outbox.message WHERE topic = 'late'}),
	'0 true true', 'a failed commit counts no attempt of its messages');

is($node->safe_psql('app', $worker_pid), $pid, 'the worker process is the same');
ok($node->log_contains('pauses the route of topic "late"'), 'the log says the route was paused');

# Once the trigger is gone the route delivers again and its pause ends.
$node->safe_psql('app', 'DROP TRIGGER at_commit ON outbox.message');
ok($node->poll_query_until('app', q{
	SELECT delivered_at IS NOT NULL FROM outbox.message WHERE topic = 'late'}),
	'the route delivers once the cause is gone');
ok($node->poll_query_until('app', q{
	SELECT consecutive_failures = 0 AND paused_until IS NULL FROM outbox.routes WHERE topic = 'late'}),
	'its failure count and pause end');
is($node->safe_psql('app', $worker_pid), $pid, 'still the same worker process');

$node->stop('fast');
done_testing();
