# A named subscription reads the log while the topic's default
# subscription updates the same message rows: its claims lease them, and
# fail every one on its first attempt, an update that moves the row out of
# the stream into the deferred messages (not a HOT update: the row's new
# version gets index entries of its own).  The named subscription reads
# the log version by version; a read that saw neither the old version (its
# update committed meanwhile) nor the new one (whose index entry came after
# the read of the index page) would pass a committed message, which the
# subscription then never delivers.
#
# In each of KRIZAKA_STRESS_ROUNDS rounds (default 4) of 3 s, on a topic
# of its own: appenders (pgbench) append messages, a quarter of them with
# one of 50 ordering keys; the default subscription's workers claim and
# fail or complete them as soon as they are appended; the named
# subscription's workers claim and complete in one statement, recording
# what they got; then the named subscription drains.  Every committed
# message must have been recorded by the named subscription exactly once,
# and nothing may be left pending.  (With the dirty snapshot the read had
# before, both runs of this test lost messages: 28 and 13.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $rounds = $ENV{KRIZAKA_STRESS_ROUNDS} || 4;
my $seconds = 3;
my $node = worker_node('read_beside_updates', '', "outbox.backoff_seconds = 1\noutbox.backoff_max_seconds = 1\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	CREATE TABLE got (id uuid, seq bigint);
});

# Each round has a topic of its own, u1, u2, ...: a new topic's index
# entries start on one page, which a read takes whole, when most of them
# are being updated.
my $dir = $node->basedir;
my $append = "$dir/append.sql";
my $default = "$dir/default.sql";
my $named = "$dir/named.sql";
append_to_file($append, q{
\set k random(1, 100)
BEGIN;
SELECT outbox.append('u' || :r, 'evt.u.v1', '{}', NULL, NULL, CASE WHEN :k <= 50 THEN 'key' || :k END);
SELECT outbox.append('u' || :r, 'evt.u.v1', '{}');
COMMIT;
});
append_to_file($default, q{
WITH c AS (SELECT c.id, c.attempts FROM outbox.claim('d' || :client_id, 'u' || :r, 10, 30) c)
SELECT count(CASE WHEN c.attempts = 1 THEN outbox.fail(c.id, 'd' || :client_id, 'first attempt')
                  ELSE outbox.complete(c.id, 'd' || :client_id) END) FROM c;
});
append_to_file($named, q{
WITH c AS (INSERT INTO got SELECT c.id, c.seq FROM outbox.claim('n' || :client_id, 'u' || :r, 10, 30, 'n') c RETURNING id)
SELECT count(outbox.complete(c.id, 'n' || :client_id, 'n')) FROM c;
});

my $connstr = $node->connstr('app');
for my $r (1 .. $rounds)
{
	$node->safe_psql('app', "SELECT outbox.subscribe('u$r', 'n')");
	my @runs;
	for my $run ([ $append, 3 ], [ $default, 3 ], [ $named, 2 ])
	{
		my ($file, $clients) = @$run;
		my ($out, $err) = ('', '');
		push @runs, [ IPC::Run::start(
			[ 'pgbench', '-n', '-c', $clients, '-j', $clients, '-T', $seconds, '-D', "r=$r",
			  '-f', $file, $connstr ],
			'>', \$out, '2>', \$err), \$out, \$err ];
	}
	my $failed = 0;
	for my $p (@runs)
	{
		next if $p->[0]->finish && ${ $p->[1] } =~ /number of failed transactions: 0 /;
		$failed++;
		diag(${ $p->[1] } . ${ $p->[2] });
	}
	is($failed, 0, "round $r: every pgbench ran without error or failed transaction");

	# the named subscription drains the rest
	my $tries = 0;
	while ($tries++ < 3000)
	{
		next if $node->safe_psql('app', qq{
			WITH c AS (INSERT INTO got SELECT c.id, c.seq FROM outbox.claim('n0', 'u$r', 500, 30, 'n') c RETURNING id)
			SELECT count(outbox.complete(c.id, 'n0', 'n')) FROM c}) ne '0';
		last if $node->safe_psql('app', qq{
			SELECT pending FROM outbox.subscription_stats WHERE topic = 'u$r' AND subscription = 'n'}) eq '0';
		usleep(20_000);
	}
}

my $total = $node->safe_psql('app', 'SELECT count(*) FROM outbox.message');
cmp_ok($total, '>', 2000 * $rounds, "$total messages appended");
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message m WHERE NOT EXISTS (SELECT FROM got g WHERE g.id = m.id)}),
	'0', 'every committed message was claimed in the named subscription')
  or diag($node->safe_psql('app', q{
	SELECT string_agg(m.topic || ':' || m.seq || coalesce(':' || m.ordering_key, ''), ' ' ORDER BY m.seq)
	  FROM outbox.message m WHERE NOT EXISTS (SELECT FROM got g WHERE g.id = m.id)}));
is($node->safe_psql('app', q{SELECT count(*) - count(DISTINCT id) FROM got}),
	'0', 'none twice');
is($node->safe_psql('app', q{
	SELECT count(*) FROM got g WHERE NOT EXISTS (SELECT FROM outbox.message m WHERE m.id = g.id)}),
	'0', 'nothing else');
is($node->safe_psql('app', q{
	SELECT string_agg(pending || ' ' || in_flight, ',') FROM outbox.subscription_stats WHERE subscription = 'n'}),
	join(',', ('0 0') x $rounds), 'subscription_stats: nothing pending in the named subscriptions');

$node->stop;
done_testing();
