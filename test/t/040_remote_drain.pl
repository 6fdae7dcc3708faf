# Remote routes through drain_once: route checks, delivery through libpq to a
# second cluster with password (SCRAM) authentication, remote errors kept in
# last_error, the password rule for non-superusers, the deadline under the
# lease, interrupts while the remote side hangs, connection reuse and
# invalidation when the user mapping changes.  A remote command past its
# deadline, or interrupted here, is not cancelled (a cancel request can
# block): its connection is closed, and the remote server, which checks its
# clients (client_connection_check_interval), ends it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Time::HiRes qw(time usleep);

# The remote cluster: role bob logs in with a SCRAM password, trustme
# without one; database inbox receives the envelopes.
my $remote = PostgreSQL::Test::Cluster->new('remote');
$remote->init;
$remote->append_conf('postgresql.conf', "password_encryption = 'scram-sha-256'\nclient_connection_check_interval = '100ms'");
$remote->start;
my $su = $remote->safe_psql('postgres', 'SELECT current_user');
$remote->safe_psql('postgres', q{
	CREATE ROLE bob LOGIN PASSWORD 'bobpw';
	CREATE ROLE trustme LOGIN;
	CREATE DATABASE inbox OWNER bob;
});
$remote->safe_psql('inbox', q{
	SET ROLE bob;
	CREATE TABLE received (id uuid PRIMARY KEY, topic text NOT NULL, env jsonb NOT NULL);
	GRANT ALL ON received TO trustme;
});
open my $hba, '>', $remote->data_dir . '/pg_hba.conf' or die $!;
print $hba "local all $su trust\nlocal all trustme trust\nlocal all all scram-sha-256\n";
close $hba;
$remote->reload;

# The local cluster with the extension and servers on the remote one.
my $node = PostgreSQL::Test::Cluster->new('local');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$node->start;
my ($rhost, $rport) = ($remote->host, $remote->port);
$node->safe_psql('postgres', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION postgres_fdw;
	CREATE EXTENSION dblink;
	CREATE ROLE alice LOGIN;
	CREATE ROLE carol LOGIN;
	GRANT USAGE ON SCHEMA outbox TO alice, carol;
	GRANT EXECUTE ON FUNCTION outbox.route_remote(text, name, text), outbox.drain_once(text),
		outbox.append(text, text, jsonb, uuid, timestamptz, text) TO alice, carol;
	CREATE SERVER inbox FOREIGN DATA WRAPPER postgres_fdw
		OPTIONS (host '$rhost', port '$rport', dbname 'inbox', fetch_size '100');
	CREATE SERVER inbox_trust FOREIGN DATA WRAPPER dblink_fdw
		OPTIONS (host '$rhost', port '$rport', dbname 'inbox');
	CREATE FOREIGN DATA WRAPPER other;
	CREATE SERVER elsewhere FOREIGN DATA WRAPPER other;
	GRANT USAGE ON FOREIGN SERVER inbox, inbox_trust TO alice, carol;
	CREATE USER MAPPING FOR $su SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	CREATE USER MAPPING FOR alice SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	CREATE USER MAPPING FOR carol SERVER inbox OPTIONS (user 'bob');
	CREATE USER MAPPING FOR alice SERVER inbox_trust OPTIONS (user 'trustme', password 'unused');
});

my $insert = q{INSERT INTO public.received (id, topic, env) VALUES (($1->>'id')::uuid, $2, $1)};

# Run SQL on the local node (as $role when given); return (stdout, stderr).
sub local_sql
{
	my ($sql, $role) = @_;
	$sql = "SET ROLE $role;\n$sql" if defined $role;
	my ($rc, $out, $err) = $node->psql('postgres', $sql);
	return ($out, $err);
}

# 1. Route checks: nothing stored when a route is refused.
my @bad = (
	[ 'credits', 'inbox', 'INSRT INTO t VALUES ($1)', qr/22023: remote command is not valid SQL.*syntax error at or near "INSRT"/s ],
	[ 'credits', 'inbox', 'SELECT $1; SELECT $1', qr/22023: .*must be exactly one SQL statement/s ],
	[ 'credits', 'inbox', 'INSERT INTO t VALUES ($2)', qr/22023: remote command must use \$1/ ],
	[ 'credits', 'inbox', 'INSERT INTO t VALUES ($1, $3)', qr/22023: remote command uses parameter \$3/ ],
	[ 'credits', 'inbox', 'COPY t FROM STDIN', qr/22023: .*cannot be a COPY statement/s ],
	[ 'credits', 'nosuch', $insert, qr/42704: server "nosuch" does not exist/ ],
	[ 'credits', 'elsewhere', $insert, qr/22023: server "elsewhere" cannot be used for a remote route/ ],
	[ 'credits', 'inbox', '   ', qr/22023: command must not be empty/ ],);
for my $case (@bad)
{
	my ($out, $err) = local_sql("\\set VERBOSITY verbose\nSELECT outbox.route_remote("
		  . join(', ', map { lit($_) } @$case[0 .. 2]) . ')');
	like($err, $case->[3], "route refused: $case->[1] / $case->[2]");
}
my ($x, $err) = local_sql("\\set VERBOSITY verbose\nSELECT outbox.route_remote('credits', 'inbox', " . lit($insert) . ')', 'carol');
like($err, qr/2F003: password is required.*Non-superusers must provide a password in the user mapping\./s,
	'a non-superuser without a password in the mapping cannot make a route');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.routes'), '0', 'no refused route was stored');

# 2. Delivery by a superuser's route: the envelope arrives as jsonb with the topic.
$node->safe_psql('postgres', 'SELECT outbox.route_remote(' . join(', ', map { lit($_) } 'credits', 'inbox', $insert) . ')');
is($node->safe_psql('postgres', q{SELECT target, server, command IS NOT NULL, created_by FROM outbox.routes}),
	"remote|inbox|t|$su", 'the route is stored');
$node->safe_psql('postgres', q{
	SELECT outbox.append('credits', 'evt.x.v1', '{"a": 1}', '0190a5a0-0000-7000-8000-000000000001');
	BEGIN; SELECT outbox.append('credits', 'evt.x.v1', '{"a": 2}'); ROLLBACK;
});
is($node->safe_psql('postgres', 'SELECT outbox.drain_once()'), '1', 'drain_once delivers one message');
is($remote->safe_psql('inbox', q{SELECT topic, pg_typeof(env), env->>'id', env->'payload' FROM received}),
	'credits|jsonb|0190a5a0-0000-7000-8000-000000000001|{"a": 1}', 'the remote row holds the topic and the envelope');
is($node->safe_psql('postgres', q{SELECT delivered_at IS NOT NULL FROM outbox.message}), 't', 'the message is complete');

# 3. A remote error fails the message with its SQLSTATE; the next one goes on.
$node->safe_psql('postgres', q{
	SELECT outbox.append('credits', 'evt.x.v1', '{"dup": true}', '0190a5a0-0000-7000-8000-000000000002');
	SELECT outbox.append('credits', 'evt.x.v1', '{"b": 3}', '0190a5a0-0000-7000-8000-000000000003');
});
$remote->safe_psql('inbox', q{INSERT INTO received VALUES ('0190a5a0-0000-7000-8000-000000000002', 'x', '{}')});
is($node->safe_psql('postgres', 'SELECT outbox.drain_once()'), '1', 'one of two delivered');
is($node->safe_psql('postgres', q{SELECT attempts, dead_at IS NULL, available_at > now(), last_error FROM outbox.message WHERE id = '0190a5a0-0000-7000-8000-000000000002'}),
	qq{1|t|t|23505: duplicate key value violates unique constraint "received_pkey"\n}
	  . qq{DETAIL: Key (id)=(0190a5a0-0000-7000-8000-000000000002) already exists.\n}
	  . qq{CONTEXT: remote command on server "inbox"},
	'the failing one backs off with the remote SQLSTATE, message and detail');
is($node->safe_psql('postgres', q{SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '0190a5a0-0000-7000-8000-000000000003'}),
	't', 'the message after it was delivered');
$node->safe_psql('postgres', q{DELETE FROM outbox.message; SELECT outbox.unroute('credits')});
$remote->safe_psql('inbox', 'TRUNCATE received');

# 4. Passwords: a non-superuser's route and drain need one, and the server must ask for it.
($x, $err) = local_sql('SELECT outbox.route_remote(' . join(', ', map { lit($_) } 'alice_topic', 'inbox', $insert) . ')', 'alice');
is($err, '', 'a non-superuser with USAGE and a password may make a route');
$node->safe_psql('postgres', q{SELECT outbox.append('alice_topic', 'evt.x.v1', '{"who": "alice"}')});
my ($delivered) = local_sql(q{SELECT outbox.drain_once('alice_topic')}, 'alice');
is($delivered, '1', 'a non-superuser drains over SCRAM with its own user mapping');
is($remote->safe_psql('inbox', q{SELECT env->'payload'->>'who' FROM received}), 'alice', 'and the row arrived');

$node->safe_psql('postgres', q{
	SELECT outbox.unroute('alice_topic');
	DELETE FROM outbox.message;
	INSERT INTO outbox.routes (topic, target, server, command, created_by)
	VALUES ('trusted', 'remote', 'inbox_trust', 'SELECT $1', 'alice');
	SELECT outbox.append('trusted', 'evt.x.v1', '{}');
});
local_sql(q{SELECT outbox.drain_once('trusted')}, 'alice');
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.message WHERE topic = 'trusted'}),
	qr/^2F003: password is required\nDETAIL: Non-superuser cannot connect if the server does not request a password\./,
	'a non-superuser is refused where the remote side trusts without a password');
$node->safe_psql('postgres', q{SELECT outbox.retry_dead_topic('trusted'); UPDATE outbox.message SET available_at = now()});
$node->safe_psql('postgres', q{SELECT outbox.drain_once('trusted')});
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.message WHERE topic = 'trusted'}),
	qr/^2F003: password is required\nDETAIL: Non-superuser cannot connect if the server does not request a password\./,
	'a superuser drain of a route made by a non-superuser uses the creator\'s mapping, and still needs a password');
$node->safe_psql('postgres', q{DELETE FROM outbox.message; SELECT outbox.unroute('trusted')});

# 5. The deadline: a remote command may use half a lease, then its
# connection is closed.
$node->safe_psql('postgres', q{
	SELECT outbox.route_remote('slow', 'inbox', 'SELECT pg_sleep(60) WHERE $1 IS NOT NULL');
	SELECT outbox.append('slow', 'evt.x.v1', '{}');
});
my $t0 = time();
is($node->safe_psql('postgres', 'SET outbox.lease_seconds = 10; SELECT outbox.drain_once()'), '0', 'nothing delivered');
my $elapsed = time() - $t0;
cmp_ok($elapsed, '>=', 4.9, 'the command ran for half the lease');
cmp_ok($elapsed, '<', 7, 'and the drain returned promptly after');
like($node->safe_psql('postgres', q{SELECT last_error FROM outbox.message WHERE topic = 'slow'}),
	qr/^57014: remote command timed out after \d+ ms on server "inbox"$/, 'the message failed with a timeout');
ok(wait_for($remote, 'inbox',
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'", '0', 5),
	'the remote command ended with its connection');

# 6. Interrupts while the remote side hangs: cancel, then terminate.
for my $signal ('pg_cancel_backend', 'pg_terminate_backend')
{
	$node->safe_psql('postgres', q{UPDATE outbox.message SET available_at = now(), leased_until = NULL, dead_at = NULL WHERE topic = 'slow'});
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->query_until(qr/started/, "\\echo started\nSET outbox.lease_seconds = 600;\nSELECT outbox.drain_once('slow');\n");
	ok(wait_for($remote, 'inbox',
			"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'", '1', 10),
		"$signal: the remote command is running");
	$t0 = time();
	$node->safe_psql('postgres', "SELECT $signal($pid)");
	if ($signal eq 'pg_cancel_backend')
	{
		$bg->query('SELECT 1');
		cmp_ok(time() - $t0, '<', 2, "$signal: served within a second or so");
		like($bg->{stderr}, qr/canceling statement due to user request/, "$signal: statement cancelled");
		$bg->quit;
	}
	else
	{
		ok(wait_for($node, 'postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0', 2),
			"$signal: backend gone within a second or so");
		$bg->{run}->kill_kill;
	}
	ok(wait_for($remote, 'inbox',
			"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'", '0', 5),
		"$signal: the remote command ended with its connection");
	is($node->safe_psql('postgres', q{SELECT attempts FROM outbox.message WHERE topic = 'slow'}),
		'1', "$signal: the interrupted drain left the message as it was");
}
$node->safe_psql('postgres', q{DELETE FROM outbox.message; SELECT outbox.unroute('slow')});

# 7. Reuse: one remote session carries the deliveries of many drains; a
# changed user mapping makes the next one reconnect with it.
$node->safe_psql('postgres', 'SELECT outbox.route_remote(' . join(', ', map { lit($_) } 'credits', 'inbox', $insert) . ')');
my $bg = $node->background_psql('postgres');
$bg->query_safe(q{SELECT outbox.append('credits', 'evt.x.v1', jsonb_build_object('n', g)) FROM generate_series(1, 20) g});
is($bg->query_safe(q{SET outbox.batch_size = 5; SELECT sum(outbox.drain_once()) FROM generate_series(1, 4)}),
	'20', 'twenty deliveries over four drains');
my $sessions = q{SELECT count(*) || '/' || min(pid) FROM pg_stat_activity WHERE application_name = 'krizaka_outbox'};
my $count_pid = $remote->safe_psql('inbox', $sessions);
like($count_pid, qr{^1/\d+$}, 'one remote session for all of them');

$node->safe_psql('postgres', "ALTER USER MAPPING FOR $su SERVER inbox OPTIONS (SET password 'bobpw2')");
$remote->safe_psql('postgres', "ALTER ROLE bob PASSWORD 'bobpw2'");
$bg->query_safe(q{SELECT outbox.append('credits', 'evt.x.v1', '{"after": "change"}')});
is($bg->query_safe(q{SELECT outbox.drain_once()}), '1', 'delivered after ALTER USER MAPPING');
my $count_pid2 = $remote->safe_psql('inbox', $sessions);
like($count_pid2, qr{^1/\d+$}, 'still one remote session');
isnt($count_pid2, $count_pid, 'but a new one, made with the new password');
$bg->quit;

$node->stop;
$remote->stop;
done_testing();
