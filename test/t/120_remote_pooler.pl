# Remote routes as users write them: a command that names its table without
# a schema runs with the remote role's own settings (as dblink_exec would
# run it) and delivers; and a remote server behind PgBouncer (Debian's
# package, pool_mode = transaction, Debian's defaults otherwise: md5
# authentication against its user list) delivers 100 messages, none twice,
# and check_route prepares the command through it.
use strict;
use warnings;
use File::Temp;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => 'pgbouncer is not installed (test/run installs it)' unless -x $pgbouncer;

# The remote cluster: op_remote logs in with a SCRAM password and may only
# insert into public.event; its search_path is the default one.
my $far = scram_node('far');
$far->safe_psql('postgres', q{
	CREATE ROLE op_remote LOGIN PASSWORD 'oppw';
	CREATE DATABASE inbox;
});
$far->safe_psql('inbox', q{
	CREATE TABLE public.event (id uuid, topic text, body jsonb, via text);
	GRANT INSERT ON public.event TO op_remote;
});

# PgBouncer in front of it, on a free loopback port, in transaction pooling
# mode; it reaches the server on its socket with op_remote's password.
my $dir = File::Temp->newdir;
my $bport = PostgreSQL::Test::Cluster::get_free_port();
my ($far_host, $far_port) = ($far->host, $far->port);
open my $ul, '>', "$dir/userlist.txt" or die $!;
print $ul qq{"op_remote" "oppw"\n};
close $ul;
open my $ini, '>', "$dir/pgbouncer.ini" or die $!;
print $ini <<INI;
[databases]
inbox = host=$far_host port=$far_port dbname=inbox

[pgbouncer]
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = md5
auth_file = $dir/userlist.txt
pool_mode = transaction
INI
close $ini;
my ($bout, $berr) = ('', '');
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', \$bout, '2>', \$berr);
ok(wait_until_bouncer($bport), 'pgbouncer listens') or diag($berr);

# The local cluster: routes made by op, an ordinary role with a password in
# its user mappings.
my $node = worker_node('near', 'app', "outbox.backoff_seconds = 1\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER direct FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$far_host', port '$far_port', dbname 'inbox');
	CREATE SERVER pooled FOREIGN DATA WRAPPER dblink_fdw OPTIONS (hostaddr '127.0.0.1', port '$bport', dbname 'inbox');
	CREATE ROLE op LOGIN;
	GRANT USAGE ON SCHEMA outbox TO op;
	GRANT EXECUTE ON FUNCTION outbox.route_remote(text, name, text), outbox.check_route(text),
		outbox.append(text, text, jsonb, uuid, timestamptz, text),
		outbox.append_batch(text, text, jsonb[], text) TO op;
	GRANT USAGE ON FOREIGN SERVER direct, pooled TO op;
	CREATE USER MAPPING FOR op SERVER direct OPTIONS (user 'op_remote', password 'oppw');
	CREATE USER MAPPING FOR op SERVER pooled OPTIONS (user 'op_remote', password 'oppw');
});
my $op = $node->connstr('app') . ' user=op';
ok($node->poll_query_until('app',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	'the worker of app runs');

# 1. The table without its schema, straight to the server.
$node->safe_psql('app', q{SELECT outbox.route_remote('plain', 'direct',
	'INSERT INTO event (id, topic, body, via) VALUES (($1->>''id'')::uuid, $2, $1, current_setting(''search_path''))')},
	connstr => $op);
$node->safe_psql('app', q{SELECT outbox.append('plain', 'evt.plain.v1', '{"n": 1}', '01890a5d-ac96-774b-bcce-b30209971001')},
	connstr => $op);
ok(wait_for($far, 'inbox', q{SELECT count(*) FROM event WHERE topic = 'plain'}, '1', 30),
	'a command that names its table without a schema delivers');
is($far->safe_psql('inbox', q{SELECT via FROM event WHERE topic = 'plain'}), '"$user", public',
	'with the remote role\'s own search_path');
is($node->safe_psql('app', q{SELECT delivered_at IS NOT NULL, last_error IS NULL FROM outbox.message WHERE topic = 'plain'}),
	't|t', 'delivered at the first attempt');

# 2. Through PgBouncer: check the route, then 100 messages, none twice.
$node->safe_psql('app', q{SELECT outbox.route_remote('pooled', 'pooled',
	'INSERT INTO event (id, topic, body, via) VALUES (($1->>''id'')::uuid, $2, $1, ''pgbouncer'')')},
	connstr => $op);
is($node->safe_psql('app', q{SELECT string_agg(step || ' ' || ok || ' ' || coalesce(sqlstate, '-'), ', ' ORDER BY n)
	FROM outbox.check_route('pooled') WITH ORDINALITY AS c(step, ok, sqlstate, message, n)}, connstr => $op),
	'route true -, server true -, connect true -, prepare true -',
	'check_route through PgBouncer: every step passes');
is($far->safe_psql('inbox', q{SELECT count(*) FROM event WHERE topic = 'pooled'}), '0', 'the check delivered nothing');

for my $tx (1 .. 10)
{
	$node->safe_psql('app', qq{SELECT count(*) FROM outbox.append_batch('pooled', 'evt.pooled.v1',
		ARRAY(SELECT jsonb_build_object('n', ($tx - 1) * 10 + i) FROM generate_series(1, 10) i))}, connstr => $op);
}
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE topic = 'pooled' AND delivered_at IS NOT NULL}, '100', 60),
	'100 messages delivered through PgBouncer');
is($far->safe_psql('inbox', q{SELECT count(*), count(DISTINCT id), min((body->'payload'->>'n')::int), max((body->'payload'->>'n')::int)
	FROM event WHERE topic = 'pooled'}), '100|100|1|100', 'each arrived once');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic = 'pooled' AND (attempts <> 1 OR last_error IS NOT NULL)}),
	'0', 'each at its first attempt');
like(slurp_file("$dir/pgbouncer.log"), qr/login attempt: db=inbox user=op_remote/, 'the calls went through PgBouncer');

$bouncer->kill_kill;
$node->stop;
$far->stop;
done_testing();

# Wait until something accepts connections on the loopback port.
sub wait_until_bouncer
{
	my ($port) = @_;
	for (1 .. 100)
	{
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp');
		if ($s) { close $s; return 1; }
		select(undef, undef, undef, 0.1);
	}
	return 0;
}
