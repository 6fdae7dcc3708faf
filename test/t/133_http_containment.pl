# An endpoint that hangs is contained.  While the calls of one HTTP route
# wait for an answer that never comes, a NOTIFY route, a remote route and
# a second HTTP route served by the same worker keep delivering within 2 s
# of each commit; each hanging call ends at outbox.http_timeout_ms (the receiver
# sees its connection closed then), its message failing with no harm to
# the others.  drain_once holds a call to the same deadline, and to half a
# lease when that is shorter.  The same worker process throughout.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use JSON::PP ();
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use OutboxHttp;

my $rx = OutboxHttp->start(paths => { '/hang' => { hang => JSON::PP::true }, '/fine' => {} });
my $node = http_node('contain', 'app', q{
outbox.http_timeout_ms = 3000
outbox.lease_seconds = 30
outbox.backoff_seconds = 60
outbox.remote_pause_after = 10
});
$node->safe_psql('postgres', 'CREATE DATABASE inbox');
$node->safe_psql('inbox', 'CREATE TABLE events (at timestamptz NOT NULL DEFAULT clock_timestamp(), env jsonb)');
my $port = $node->port;
my $host = $node->host;
$node->safe_psql('app', qq{
	CREATE EXTENSION dblink;
	CREATE SERVER inbox FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'inbox');
	CREATE USER MAPPING FOR CURRENT_USER SERVER inbox;
	SELECT outbox.route_remote('far', 'inbox', 'INSERT INTO events (env) VALUES (\$1)');
});
$node->safe_psql('app', join(";\n", route_http('stuck', $rx->url('/hang')), route_http('fine', $rx->url('/fine')),
	q{SELECT outbox.route_notify('live', 'live_events')}));
my $wpid = worker_pid($node, 'app');
my $listener = $node->background_psql('app');
$listener->query_safe('LISTEN live_events');
my $heard = '';

# 1. Three messages on the hanging route: their calls, one after the
# other, hang for three times 3 s.
my @stuck = map { sprintf('0190a5a0-0000-7000-8000-0000000000%02d', $_) } 1 .. 3;
$node->safe_psql('app', 'BEGIN; ' . join('', map { "SELECT outbox.append('stuck', 'evt.x.v1', '{}', '$_'); " } @stuck) . 'COMMIT');
my ($first) = $rx->wait_requests('/hang', 1);
ok($first, 'the first call hangs');

# 2. Meanwhile, messages on the healthy routes, paced over the hang.
my (@fine_s, @live_s, @far_s, @fine_ids);
for my $i (1 .. 6)
{
	my $id = sprintf('0190a5a0-0000-7000-8000-0000000001%02d', $i);
	my $live_id = sprintf('0190a5a0-0000-7000-8000-0000000002%02d', $i);
	push @fine_ids, $id;
	my $t = time();
	my $far_id = sprintf('0190a5a0-0000-7000-8000-0000000003%02d', $i);
	$node->safe_psql('app', "BEGIN; SELECT outbox.append('fine', 'evt.x.v1', '{}', '$id'); "
		  . "SELECT outbox.append('live', 'evt.x.v1', '{\"n\": $i}', '$live_id'); "
		  . "SELECT outbox.append('far', 'evt.x.v1', '{}', '$far_id'); COMMIT");
	my ($r) = grep { $_->{headers}{'webhook-id'} eq $id } $rx->wait_requests('/fine', $i, 10);
	push @fine_s, $r ? $r->{time} - $t : 999;
	my $live = 999;
	while (time() - $t < 10)
	{
		$heard .= $listener->query_safe('SELECT 1');
		if ($heard =~ /\Q$live_id\E/) { $live = time() - $t; last; }
		usleep(10_000);
	}
	push @live_s, $live;
	my $far = 999;
	while (time() - $t < 10)
	{
		if ($node->safe_psql('inbox', "SELECT count(*) FROM events WHERE env->>'id' = '$far_id'") eq '1')
		{
			$far = time() - $t;
			last;
		}
		usleep(10_000);
	}
	push @far_s, $far;
	usleep(600_000);
}
diag(sprintf('healthy HTTP route (s): %s; NOTIFY (s): %s; remote (s): %s', join(' ', map { sprintf('%.3f', $_) } @fine_s),
		join(' ', map { sprintf('%.3f', $_) } @live_s), join(' ', map { sprintf('%.3f', $_) } @far_s)));
for my $i (0 .. 5)
{
	cmp_ok($fine_s[$i], '<', 2, sprintf('HTTP message %d received %.3f s after its commit', $i + 1, $fine_s[$i]));
	cmp_ok($live_s[$i], '<', 2, sprintf('notification %d heard %.3f s after its commit', $i + 1, $live_s[$i]));
	cmp_ok($far_s[$i], '<', 2, sprintf('remote message %d inserted %.3f s after its commit', $i + 1, $far_s[$i]));
}

# every healthy request came while a hanging call was open
my @hangs = $rx->requests('/hang');
my @fine = $rx->requests('/fine');
my $inside = 0;
for my $f (@fine)
{
	$inside++ if grep { $_->{time} <= $f->{time} && ($rx->closed_at($_->{seq}) // 1e12) >= $f->{time} } @hangs;
}
is($inside, 6, 'all six healthy requests arrived while a hanging call was in progress');
is(join(' ', map { $_->{headers}{'webhook-id'} } @fine), join(' ', @fine_ids), 'each healthy message once, in order');

# 3. Each hanging call ends at outbox.http_timeout_ms.
@hangs = $rx->wait_requests('/hang', 3, 20);
is(join(' ', map { $_->{headers}{'webhook-id'} } @hangs), join(' ', @stuck), 'the three messages were called in order');
for my $h (@hangs)
{
	my $closed;
	for (1 .. 500) { last if defined($closed = $rx->closed_at($h->{seq})); usleep(20_000); }
	my $held = defined $closed ? $closed - $h->{time} : 999;
	ok($held > 2.8 && $held < 4.5, sprintf('call of %s: its connection closed after %.2f s', $h->{headers}{'webhook-id'}, $held));
}
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE topic = 'stuck' AND attempts = 1 AND leased_until IS NULL},
		'3', 10),
	'each hanging message failed once');
like($node->safe_psql('app', qq{SELECT last_error FROM outbox.message WHERE id = '$stuck[0]'}), qr/tim(ed|e) ?out|timeout/i,
	'with a timeout');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE dead_at IS NOT NULL}), '0', 'none is dead');
is(worker_pid($node, 'app'), $wpid, 'the same worker process throughout');
$listener->quit;

# 4. drain_once: the call ends at outbox.http_timeout_ms, or at half a
# lease when that comes first.
$node->safe_psql('postgres', route_http('hang', $rx->url('/hang')));
$node->safe_psql('postgres', q{SELECT outbox.append('hang', 'evt.x.v1', '{}')});
for my $case ([ 'SET outbox.http_timeout_ms = 1000', 1 ], [ 'SET outbox.http_timeout_ms = 60000; SET outbox.lease_seconds = 10', 5 ])
{
	my ($set, $limit) = @$case;
	$node->safe_psql('postgres', q{UPDATE outbox.message SET available_at = now()});
	my $t0 = time();
	is($node->safe_psql('postgres', "$set; SELECT outbox.drain_once()"), '0', "$set: nothing delivered");
	my $took = time() - $t0;
	ok($took > $limit - 0.1 && $took < $limit + 1.5, sprintf('%s: the call ended after %.2f s', $set, $took));
}
is($node->safe_psql('postgres', q{SELECT attempts FROM outbox.message}), '2', 'each drain counted its attempt');

$node->stop;
done_testing();
