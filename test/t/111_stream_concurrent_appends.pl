# The horizon of appends in progress, under concurrency: appenders (pgbench
# clients, some transactions rolled back, some holding their appends open
# for a moment) and claimers that complete what they claim run at once on
# one topic.  No claim position passes a message whose append was still
# in progress: once the appenders stop, claims find every committed message,
# and none of the rolled-back ones.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('concurrent', '');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');

my $dir = $node->basedir;
my $commit = "$dir/commit.sql";
my $rollback = "$dir/rollback.sql";
my $claim = "$dir/claim.sql";
append_to_file($commit, q{
BEGIN;
SELECT outbox.append('s', 'evt.a.v1', '{"kept": true}');
SELECT pg_sleep(random() * 0.004);
SELECT outbox.append('s', 'evt.a.v1', '{"kept": true}');
COMMIT;
});
append_to_file($rollback, q{
BEGIN;
SELECT outbox.append('s', 'evt.a.v1', '{"kept": false}');
SELECT pg_sleep(random() * 0.004);
ROLLBACK;
});
append_to_file($claim, q{
WITH c AS (SELECT * FROM outbox.claim('w', 's', 20, 30))
SELECT count(*) FROM c WHERE outbox.complete(c.id, 'w');
});

my $connstr = $node->connstr('app');
my $appenders = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '6', '-j', '2', '-T', '6',
	  '-f', "$commit\@4", '-f', "$rollback\@1", $connstr ],
	'>', \my $aout, '2>', \my $aerr);
my $claimers = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '1', '-T', '6', '-f', $claim, $connstr ],
	'>', \my $cout, '2>', \my $cerr);
ok($appenders->finish, 'the appenders ran without error') or diag($aerr);
ok($claimers->finish, 'the claimers ran without error') or diag($cerr);

my $total = $node->safe_psql('app', 'SELECT count(*) FROM outbox.message');
cmp_ok($total, '>', 100, "$total messages appended");
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE NOT (payload->>'kept')::boolean}),
	'0', 'no rolled-back append is stored');

# claims go on until they find nothing: each message is found
my $rounds = 0;
while ($rounds++ < 1000)
{
	last if $node->safe_psql('app', q{
		WITH c AS (SELECT * FROM outbox.claim('w', 's', 500, 30))
		SELECT count(*) FROM c WHERE outbox.complete(c.id, 'w')}) eq '0';
}
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}),
	'0', 'every committed message was claimed: no position was passed while its append ran');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE attempts <> 1}),
	'0', 'each exactly once');

$node->stop;
done_testing();
