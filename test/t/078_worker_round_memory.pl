# The worker's rounds leave nothing behind in its long-lived memory: a
# worker that runs thousands of rounds, each delivering a message to a
# NOTIFY route or to a remote database, ends with TopMemoryContext the size
# it had before, as pg_log_backend_memory_contexts() reports it; and the
# same worker runs all of them.  Anything a round allocates
# outside its own memory context after a commit would land there and stay
# for the life of the worker.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('round_memory', 'postgres');
$node->safe_psql('postgres', 'CREATE DATABASE sink');
$node->safe_psql('sink', 'CREATE TABLE received (id uuid)');
remote_server($node, 'postgres', 'sink', 'sink');
$node->safe_psql('postgres', q{
	SELECT outbox.route_notify('rm', 'rm_events');
	SELECT outbox.route_remote('rr', 'sink',
		'INSERT INTO public.received (id) VALUES (($1->>''id'')::uuid)');
	-- one message per transaction, each a round of the worker: it is woken
	-- by the commit, and the next append waits until it has delivered
	CREATE PROCEDURE rounds(topic text, n int) LANGUAGE plpgsql AS $$
	BEGIN
		FOR i IN 1 .. n LOOP
			PERFORM outbox.append(topic, 'evt.rm.v1', jsonb_build_object('i', i));
			COMMIT;
			FOR w IN 1 .. 2000 LOOP
				EXIT WHEN NOT EXISTS (SELECT FROM outbox.message WHERE delivered_at IS NULL);
				PERFORM pg_sleep(0.001);
			END LOOP;
		END LOOP;
	END
	$$;
});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM outbox.worker_status() WHERE state <> 'starting'}),
	'the worker runs');
my $pid = worker_pid($node, 'postgres');

# The bytes used in TopMemoryContext of $pid, from its memory contexts
# written to the server log (its level is 0 up to 17, 1 from 18).
sub top_used
{
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	my $used;
	my $until = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (!defined $used && time() < $until)
	{
		my $log = slurp_file($node->logfile, $offset);
		($used) = $log =~ /\[$pid\] .*?LOG:  level: [01]; TopMemoryContext: [^\n]*?; (\d+) used/;
		usleep(50_000) unless defined $used;
	}
	ok(defined $used, 'the worker logs its memory contexts');
	return $used // 0;
}

# A leak of one small chunk per round would be at least 24 bytes a round;
# the dump of the contexts itself leaves a few hundred.
foreach my $case (['rm', 'a NOTIFY route', 3000], ['rr', 'a remote route', 500])
{
	my ($topic, $what, $n) = @$case;
	$node->safe_psql('postgres', "CALL rounds('$topic', 100)");    # warm: caches, plans
	my $before = top_used();
	$node->safe_psql('postgres', "CALL rounds('$topic', $n)");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL'),
		'0', "every message to $what was delivered");
	is(worker_pid($node, 'postgres'), $pid, "the same worker delivered every message to $what");
	my $after = top_used();
	diag("worker $pid: TopMemoryContext $before bytes used before $n rounds to $what, $after after");
	cmp_ok($after - $before, '<', 8192, "TopMemoryContext does not grow with the rounds of $what");
}
is($node->safe_psql('sink', 'SELECT count(*) FROM received'), '600', 'the remote database got each message');

# Before each remote batch leaves, the worker flushes the WAL written so far;
# at the end of a page, the position to flush is that page's start, not the
# header of the next (which the flush would refuse, ending the worker).
unlike(slurp_file($node->logfile), qr/xlog flush request|past end of generated WAL/,
	'no flush past the WAL written');

$node->stop;
done_testing();
