# A drain worker whose commit waits for a synchronous standby that is down
# never lets a delivery go out ahead of it.  While the wait lasts,
# worker_status() says 'waiting for replication'; pg_cancel_backend() on
# the worker changes nothing (no notification reaches the listener, no
# remote row is written, the messages stay undelivered and the wait goes
# on), and neither does pg_terminate_backend(), which takes effect once the
# commit is done.  When the standby is back, every message is delivered
# exactly once: each notification reaches the listener once, each remote
# row is written once.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Time::HiRes qw(time usleep);

my ($primary, $standby, $target) = replicated_outbox("outbox.lease_seconds = 5\n");
ok($primary->poll_query_until('postgres',
		q{SELECT state FROM outbox.worker_status() WHERE datname = 'app'}, 'sleeping'),
	'the worker of app runs');

my $listener = $primary->background_psql('app');
$listener->query_safe('LISTEN events');
my $heard = '';

sub append_both
{
	my ($n) = @_;
	return $primary->safe_psql('app', qq{
		SET synchronous_commit = local;
		BEGIN;
		SELECT outbox.append(t, 'evt.test.v1', jsonb_build_object('n', g))
		  FROM unnest(ARRAY['n', 'r']) t, generate_series(1, $n) g;
		COMMIT;
	});
}

# Assert that $sql keeps answering $expected for $seconds (the worker has
# that long to misbehave).
sub stays
{
	my ($node, $db, $sql, $expected, $seconds, $what) = @_;
	my $until = time() + $seconds;
	my $answer;
	do
	{
		$answer = $node->safe_psql($db, $sql);
		usleep(100_000);
	} while ($answer eq $expected && time() < $until);
	is($answer, $expected, $what);
}

# 1. With the standby connected and synchronous, both routes deliver.
$primary->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = '*'});
$primary->reload;
ok($primary->poll_query_until('postgres',
		q{SELECT sync_state FROM pg_stat_replication}, 'sync'),
	'the standby is synchronous');
append_both(1);
ok($target->poll_query_until('postgres', 'SELECT count(*) FROM received', '1'),
	'a remote row is written while the standby runs');
my @ids = notified_ids($listener, \$heard, 1);
is(scalar(@ids), 1, 'a notification arrives while the standby runs');

# 2. The standby stops: the worker's next commit waits for it.
$standby->stop;
my $pid = worker_pid($primary, 'app');
my $log_offset = -s $primary->logfile;
append_both(3);
ok($primary->poll_query_until('postgres',
		q{SELECT state FROM outbox.worker_status() WHERE datname = 'app'},
		'waiting for replication'),
	'worker_status() shows the worker waiting for replication');
is($primary->safe_psql('postgres',
		"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid"),
	'SyncRep', 'its wait event is SyncRep');

my $undelivered =
  q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL AND topic IN ('n', 'r')};
my $nothing_more = qq{SELECT (SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND wait_event = 'SyncRep')
                     || '/' || ($undelivered)};

# 3. pg_cancel_backend, then 4. pg_terminate_backend: the wait goes on and
# nothing is delivered (neither PostgreSQL's warning of a cancelled wait nor
# that of a terminated one is logged); the termination waits for the commit.
for my $signal ('pg_cancel_backend', 'pg_terminate_backend')
{
	is($primary->safe_psql('postgres', "SELECT $signal($pid)"), 't',
		"$signal() signals the worker");
	stays($primary, 'app', $nothing_more, '1/6', 3,
		"after $signal() the worker still waits and the six messages are undelivered");
	is($target->safe_psql('postgres', 'SELECT count(*) FROM received'), '1',
		"after $signal() no remote row is written");
	is(scalar(notified_ids($listener, \$heard)), 1,
		"after $signal() no notification reaches the listener");
	ok(!$primary->log_contains(qr/canceling (the )?wait for synchronous replication/, $log_offset),
		"$signal() did not cut the wait short");
}

# 5. The standby comes back: the commit is confirmed, the terminated worker
# leaves, a new one delivers the rest (the remote batch the old one had
# leased, once its lease ends), each message exactly once.
$standby->start;
ok($primary->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0'),
	'the terminated worker leaves once its commit is confirmed');
ok($primary->poll_query_until('app', $undelivered, '0'), 'every message is delivered');
is($target->safe_psql('postgres', q{SELECT count(*) || '/' || count(DISTINCT id) FROM received}),
	'4/4', 'four remote rows, one per message');
is($target->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM received'),
	$primary->safe_psql('app',
		q{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox.message WHERE topic = 'r'}),
	'they are the remote messages');
@ids = notified_ids($listener, \$heard, 4);
my %seen;
$seen{$_}++ for @ids;
is(scalar(@ids) . '/' . scalar(keys %seen), '4/4', 'four notifications, one per message');
is($primary->safe_psql('app',
		q{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox.message WHERE topic = 'n'}),
	join(',', sort keys %seen), 'they are the notifications of the NOTIFY messages');
ok($primary->poll_query_until('postgres',
		"SELECT state <> 'stopped' AND pid <> $pid FROM outbox.worker_status() WHERE datname = 'app'"),
	'the launcher started a new worker');

$listener->quit;
$primary->stop;
$standby->stop;
$target->stop;
done_testing();
