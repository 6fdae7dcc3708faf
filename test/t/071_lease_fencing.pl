# Lease fencing: a role granted complete, extend and fail cannot act on the
# background worker's leases.  The worker's lease owner is not derived from
# anything public (its pid is in pg_stat_activity), so guessing it completes,
# fails or extends nothing, and an open transaction that tried takes no row
# lock the worker would then wait on: the worker's delivery completes while
# that transaction is still open.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('fencing', 'app');
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($host, $port) = ($node->host, $node->port);
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE inbox');
$node->safe_psql('inbox', 'CREATE TABLE received (id uuid PRIMARY KEY, env jsonb)');
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER inbox FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'inbox');
	CREATE USER MAPPING FOR $su SERVER inbox OPTIONS (user '$su');
	SELECT outbox.route_remote('slow', 'inbox',
		'INSERT INTO public.received (id, env) VALUES ((\$1->>''id'')::uuid, \$1)');
	CREATE ROLE mallory LOGIN;
	GRANT USAGE ON SCHEMA outbox TO mallory;
	GRANT EXECUTE ON FUNCTION outbox.complete(uuid, text, text), outbox.complete_many(uuid[], text, text),
		outbox.extend(uuid, text, integer, text), outbox.fail(uuid, text, text, text) TO mallory;
	GRANT pg_read_all_stats TO mallory;
});
ok($node->poll_query_until('app',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	'the worker of app runs');
my $worker_pid = $node->safe_psql('app',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'});

# The remote table is locked, so the worker's delivery waits there with its
# lease committed.
my $blocker = $node->background_psql('inbox');
$blocker->query_safe('BEGIN; LOCK TABLE received IN EXCLUSIVE MODE');
my $id = '01890a5d-ac96-774b-bcce-b302099a7001';
$node->safe_psql('app', "SELECT outbox.append('slow', 'evt.slow.v1', '{\"n\": 1}', '$id')");
ok($node->poll_query_until('app',
	"SELECT lease_owner IS NOT NULL AND leased_until > now() FROM outbox.message WHERE id = '$id'"),
	'the worker holds a lease on the message');
my $owner = $node->safe_psql('app', "SELECT lease_owner FROM outbox.message WHERE id = '$id'");
unlike($owner, qr/^krizaka_outbox worker \d+$/, 'the lease owner is more than the public pid');
like($owner, qr/\b$worker_pid\b/, 'and still names the worker process for operators');

# mallory guesses the owner from the pid that pg_stat_activity shows.
my $guess = "krizaka_outbox worker $worker_pid";
my $mallory = $node->connstr('app') . ' user=mallory';
is($node->safe_psql('app', qq{
	SELECT outbox.complete('$id', '$guess')::text
	    || outbox.complete_many(ARRAY['$id']::uuid[], '$guess')::text
	    || outbox.fail('$id', '$guess', 'spoofed')::text
	    || outbox.extend('$id', '$guess', 3600)::text}, connstr => $mallory),
	'false0falsefalse', 'a guessed owner completes, fails and extends nothing');

# An open transaction of mallory's that tried to extend the lease holds no
# lock on the row: the worker's delivery completes while it stays open.
my $attacker = $node->background_psql('app', connstr => $mallory);
is($attacker->query_safe("BEGIN; SELECT outbox.extend('$id', '$guess', 3600)"),
	'f', 'extend with the guessed owner inside an open transaction');
$blocker->query_safe('COMMIT');
ok(wait_for($node, 'app',
	"SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id'", 't', 30),
	'the worker completes its delivery while the attacker transaction is open');
$attacker->query_safe('COMMIT');
$attacker->quit;
$blocker->quit;
is($node->safe_psql('inbox', 'SELECT count(*) FROM received'), '1', 'delivered exactly once');
is($node->safe_psql('app', "SELECT attempts || ' ' || coalesce(last_error, '') FROM outbox.message WHERE id = '$id'"),
	'1 ', 'on its first attempt, with no error');
is($node->safe_psql('app', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	$worker_pid, 'by the same worker process throughout');

$node->stop;
done_testing();
