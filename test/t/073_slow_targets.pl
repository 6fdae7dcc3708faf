# Slow targets are contained.  Two remote routes whose server is a real
# TCP listener that accepts connections and never answers, a healthy remote
# route to a second database and a NOTIFY route with a real listener, all
# served by one drain worker: while the hanging routes have due messages,
# the notifications reach the listener within 3 s of their commit and the
# healthy route delivers within a second; each hanging call ends at
# outbox.remote_timeout_ms, the two hanging routes wait side by side rather
# than one after the other, and each is paused after
# outbox.remote_pause_after timeouts in a row (its state visible in
# outbox.routes and outbox.topic_stats) with no message dead and no attempt
# counted while it is paused; after the pause one message probes it and the
# pause doubles; a route change resets the state.  drain_once honours the
# deadline and the breaker.  The same worker process throughout.
use strict;
use warnings;
use IO::Socket::INET;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Time::HiRes qw(time usleep);

# The hanging server: accepts every connection and never says a word.  It
# runs in a child forked before any cluster exists (so that the child owns
# none of their clean-up), leaves by _exit, and is killed at the end.
my $listen = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1',
	LocalPort => 0,
	Proto => 'tcp',
	Listen => 64,
	ReuseAddr => 1) or die "cannot listen: $!";
my $hang_port = $listen->sockport;
my $parent = $$;
my $hang_pid = fork() // die "fork: $!";
if ($hang_pid == 0)
{
	my @held;
	alarm(600);    # never outlive a test run that lost track of us
	while (my $client = $listen->accept) { push @held, $client; }
	POSIX::_exit(0);
}
close $listen;
END { kill 'KILL', $hang_pid if $hang_pid && $$ == $parent; }

my $node = PostgreSQL::Test::Cluster->new('slow');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 60000
outbox.lease_seconds = 20
outbox.remote_timeout_ms = 2500
outbox.remote_pause_after = 3
outbox.backoff_seconds = 20
outbox.max_attempts = 3
});
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($host, $port) = ($node->host, $node->port);
my $insert = q{INSERT INTO public.received (id, topic) VALUES (($1->>'id')::uuid, $2)};
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE near');
$node->safe_psql('near', 'CREATE TABLE received (id uuid PRIMARY KEY, topic text)');
for my $db ('app', 'postgres')
{
	$node->safe_psql($db, qq{
		CREATE EXTENSION krizaka_outbox;
		CREATE EXTENSION dblink;
		CREATE SERVER near FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'near');
		CREATE USER MAPPING FOR $su SERVER near OPTIONS (user '$su');
		CREATE SERVER stuck FOREIGN DATA WRAPPER dblink_fdw OPTIONS (hostaddr '127.0.0.1', port '$hang_port', dbname 'x');
		CREATE USER MAPPING FOR $su SERVER stuck OPTIONS (user '$su');
	});
}
$node->safe_psql('app', 'SELECT outbox.route_notify(' . lit('live') . ", 'live_events')");
for my $route ([ 'fine', 'near' ], [ 'stuck', 'stuck' ], [ 'stuck2', 'stuck' ])
{
	$node->safe_psql('app', 'SELECT outbox.route_remote(' . join(', ', map { lit($_) } @$route, $insert) . ')');
}
my $worker_sql = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'};
ok($node->poll_query_until('app', "SELECT count(*) = 1 FROM ($worker_sql) w"), 'the worker of app runs');
my $wpid = $node->safe_psql('app', $worker_sql);

my $listener = $node->background_psql('app');
$listener->query_safe('LISTEN live_events');
my $heard = '';

# The seconds until the listener hears a notification carrying $tag.
sub await_notification
{
	my ($tag, $since) = @_;
	while (time() - $since < 10)
	{
		$heard .= $listener->query_safe('SELECT 1');
		return time() - $since if $heard =~ /\Q$tag\E/;
		usleep(10_000);
	}
	return 999;
}

# The seconds until message $id is delivered.
sub await_delivery
{
	my ($id, $since) = @_;
	while (time() - $since < 10)
	{
		return time() - $since
		  if $node->safe_psql('app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id'") eq 't';
		usleep(20_000);
	}
	return 999;
}

# Messages as (topic, uuid suffix); ids end in the given four digits.
sub id_of { sprintf('01890a5d-ac96-774b-bcce-b302099a%04d', $_[0]) }

sub append
{
	my ($topic, $n) = @_;
	$node->safe_psql('app', "SELECT outbox.append('$topic', 'evt.x.v1', '{\"n\": $n}', '" . id_of($n) . "')");
	return time();
}

# 1. Five messages for each hanging route, committed together: the worker
# leases them and connects to the listener that never answers.
my $t_hang = time();
$node->safe_psql('app', 'BEGIN; '
	  . join('', map { "SELECT outbox.append('stuck', 'evt.x.v1', '{}', '" . id_of(100 + $_) . "'); " } 1 .. 5)
	  . join('', map { "SELECT outbox.append('stuck2', 'evt.x.v1', '{}', '" . id_of(200 + $_) . "'); " } 1 .. 5)
	  . 'COMMIT');
ok(wait_for($node, 'app',
		q{SELECT count(*) FROM outbox.message WHERE topic IN ('stuck', 'stuck2') AND leased_until > now()}, '10', 5),
	'the worker leased both hanging batches');

# 2. While they hang, notifications and the healthy remote route go on.
# The appends are paced over the hang (three timeouts of 2.5 s) on purpose.
my (@notify_s, @remote_s);
for my $i (1 .. 4)
{
	my $t = append('live', $i);
	push @notify_s, await_notification(id_of($i), $t);
	$t = append('fine', 10 + $i);
	push @remote_s, await_delivery(id_of(10 + $i), $t);
	usleep(1_200_000) if $i < 4;
}
my $window = time() - $t_hang;
diag(sprintf('NOTIFY latency (s): %s; healthy remote route (s): %s; over %.1f s of hanging',
		join(' ', map { sprintf('%.3f', $_) } @notify_s),
		join(' ', map { sprintf('%.3f', $_) } @remote_s), $window));
for my $i (0 .. 3)
{
	cmp_ok($notify_s[$i], '<', 3, sprintf('notification %d heard %.3f s after its commit', $i + 1, $notify_s[$i]));
	cmp_ok($remote_s[$i], '<', 1, sprintf('healthy remote message %d delivered %.3f s after its commit', $i + 1, $remote_s[$i]));
}
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message
	 WHERE topic IN ('stuck', 'stuck2') AND leased_until > now() AND delivered_at IS NULL AND dead_at IS NULL}),
	'10', sprintf('all of it while both hanging batches were still out (%.1f s)', $window));
is($node->safe_psql('near', q{SELECT count(*) FROM received WHERE topic = 'fine'}), '4', 'the healthy route delivered each message once');

# 3. Each hanging route is paused after three timeouts in a row; the two
# waited side by side, not one after the other.
ok(wait_for($node, 'app',
		q{SELECT string_agg(topic || ':' || consecutive_failures || ':' || (paused_until > now()), ',' ORDER BY topic)
		    FROM outbox.routes WHERE topic LIKE 'stuck%'}, 'stuck:3:true,stuck2:3:true', 10),
	'both hanging routes are paused after three failures');
my $paused_after = time() - $t_hang;
cmp_ok($paused_after, '<', 11, sprintf('within three timeouts of 2.5 s (%.1f s)', $paused_after));
is($node->safe_psql('app', q{
	SELECT abs(extract(epoch FROM a.paused_until - b.paused_until)) < 1.5
	  FROM outbox.routes a, outbox.routes b WHERE a.topic = 'stuck' AND b.topic = 'stuck2'}),
	't', 'the two routes were paused at the same time: their calls did not wait on each other');
like($node->safe_psql('app', q{SELECT last_failure FROM outbox.routes WHERE topic = 'stuck'}),
	qr/^08001: connection to server "stuck" timed out after 2\d\d\d ms$/, 'last_failure says why');
is($node->safe_psql('app', q{
	SELECT round(extract(epoch FROM paused_until - now()) / 5) * 5 FROM outbox.routes WHERE topic = 'stuck'}),
	'20', 'the first pause is outbox.backoff_seconds long');
is($node->safe_psql('app', q{
	SELECT s.paused_until = r.paused_until FROM outbox.topic_stats s JOIN outbox.routes r USING (topic) WHERE topic = 'stuck'}),
	't', 'topic_stats shows the pause');
is($node->safe_psql('app', q{
	SELECT string_agg(attempts || '/' || (dead_at IS NULL) || '/' || (leased_until IS NULL) || '/'
	                  || coalesce(substr(last_error, 1, 5), '-'), ' ' ORDER BY id)
	  FROM outbox.message WHERE topic = 'stuck'}),
	'1/true/true/08001 1/true/true/08001 1/true/true/08001 0/true/true/- 0/true/true/-',
	'three messages failed once each, the other two were released with no attempt counted; none is dead');

# 4. While paused, neither the worker nor drain_once calls the route or
# counts an attempt.
my $attempts = q{SELECT sum(attempts) FROM outbox.message WHERE topic = 'stuck'};
my $t = append('live', 5);
cmp_ok(await_notification(id_of(5), $t), '<', 3, 'a round ran meanwhile');
my $t0 = time();
is($node->safe_psql('app', q{SELECT outbox.drain_once('stuck')}), '0', 'drain_once skips the paused route');
cmp_ok(time() - $t0, '<', 1, 'at once');
is($node->safe_psql('app', $attempts), '3', 'no attempt was counted during the pause');

# 5. When the pause ends, one message probes the route; it times out and
# the pause doubles.
$node->safe_psql('app', q{UPDATE outbox.routes SET paused_until = now() WHERE topic = 'stuck'});
append('live', 6);    # wakes the worker
ok(wait_for($node, 'app', q{SELECT consecutive_failures FROM outbox.routes WHERE topic = 'stuck'}, '4', 10),
	'the probe failed too');
is($node->safe_psql('app', $attempts), '4', 'one message probed the route');
is($node->safe_psql('app', q{
	SELECT round(extract(epoch FROM paused_until - now()) / 5) * 5 FROM outbox.routes WHERE topic = 'stuck'}),
	'40', 'the second pause is twice as long');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE dead_at IS NOT NULL}), '0', 'no message is dead');

# 6. A route change resets the state; the messages released by the pause
# go out through the new route.
$node->safe_psql('app', 'SELECT outbox.route_remote(' . join(', ', map { lit($_) } 'stuck', 'near', $insert) . ')');
is($node->safe_psql('app', q{
	SELECT consecutive_failures, paused_until IS NULL, last_failure IS NULL FROM outbox.routes WHERE topic = 'stuck'}),
	'0|t|t', 'route_remote again resets the breaker');
ok(wait_for($node, 'near', q{SELECT count(*) FROM received WHERE topic = 'stuck'}, '1', 10),
	'the message never tried is delivered through the new route');
is($node->safe_psql('app', q{SELECT paused_until IS NOT NULL FROM outbox.routes WHERE topic = 'stuck2'}),
	't', 'the other hanging route stays paused');
is($node->safe_psql('app', $worker_sql), $wpid, 'the same worker process throughout');
$listener->quit;

# 7. drain_once (no worker in this database): each call ends at its own
# deadline, and the breaker pauses the route after remote_pause_after.
$node->safe_psql('postgres', 'SELECT outbox.route_remote(' . join(', ', map { lit($_) } 'hang', 'stuck', $insert) . ')');
$node->safe_psql('postgres', q{SELECT outbox.append('hang', 'evt.x.v1', '{}') FROM generate_series(1, 3)});
$t0 = time();
is($node->safe_psql('postgres', q{
	SET outbox.remote_timeout_ms = 400; SET outbox.remote_pause_after = 2; SELECT outbox.drain_once()}),
	'0', 'drain_once delivers nothing');
my $elapsed = time() - $t0;
cmp_ok($elapsed, '>=', 0.8, sprintf('two calls of 400 ms (%.2f s)', $elapsed));
cmp_ok($elapsed, '<', 2, 'then the route is paused');
is($node->safe_psql('postgres', q{
	SELECT consecutive_failures, paused_until > now(), last_failure FROM outbox.routes WHERE topic = 'hang'}) =~ s/after \d+ ms/after N ms/r,
	'2|t|08001: connection to server "stuck" timed out after N ms', 'drain_once recorded the pause');
is($node->safe_psql('postgres', q{SELECT string_agg(attempts::text, ' ' ORDER BY id) FROM outbox.message}),
	'1 1 0', 'the third message was released untried');
$t0 = time();
is($node->safe_psql('postgres', q{SELECT outbox.drain_once()}), '0', 'the next drain_once skips it');
cmp_ok(time() - $t0, '<', 1, 'at once');

$node->stop;
done_testing();
