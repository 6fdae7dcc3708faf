# Remote identity: a remote route is delivered with the user mapping of the
# role that made it, never with the delivering role's (the worker's role, by
# default the bootstrap superuser, or the caller of drain_once).  An operator
# whose own mapping is harmless cannot borrow the worker's superuser mapping
# to become a superuser; the creator's USAGE, mapping and existence are
# checked again at each delivery; the remote session runs with the remote
# role's own settings (its search_path), as dblink_exec would.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

# The remote cluster: its superuser is trusted, everybody else logs in with
# a SCRAM password.  op_remote may only insert into public.seen.
my $far = scram_node('far');
$far->safe_psql('postgres', q{
	CREATE ROLE far_admin SUPERUSER LOGIN PASSWORD 'adminpw';
	CREATE ROLE op_remote LOGIN PASSWORD 'oppw';
	CREATE DATABASE inbox;
});
$far->safe_psql('inbox', q{
	CREATE EXTENSION dblink;
	CREATE SCHEMA sneaky;
	CREATE TABLE public.seen (id uuid PRIMARY KEY, who name, path text);
	GRANT INSERT ON public.seen TO op_remote;
	ALTER ROLE op_remote SET search_path = sneaky, public;
});

# The local cluster: the worker runs as the bootstrap superuser, which has
# a superuser mapping on the remote server.
my $node = worker_node('near', 'app', "outbox.backoff_seconds = 1\n");
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($host, $port, $far_host, $far_port) = ($node->host, $node->port, $far->host, $far->port);
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER far FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$far_host', port '$far_port', dbname 'inbox');
	CREATE USER MAPPING FOR $su SERVER far OPTIONS (user 'far_admin', password 'adminpw');
	CREATE ROLE op LOGIN;
	GRANT USAGE ON SCHEMA outbox TO op;
	GRANT EXECUTE ON FUNCTION outbox.route_remote(text, name, text), outbox.drain_once(text),
		outbox.append(text, text, jsonb, uuid, timestamptz, text) TO op;
	GRANT USAGE ON FOREIGN SERVER far TO op;
	CREATE USER MAPPING FOR op SERVER far OPTIONS (user 'op_remote', password 'oppw');
});
ok($node->poll_query_until('app',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	'the worker of app runs');
my $op = $node->connstr('app') . ' user=op';

# Delivered as whom, with which search_path.
$node->safe_psql('app', q{SELECT outbox.route_remote('who', 'far',
	'INSERT INTO public.seen (id, who, path) VALUES (($1->>''id'')::uuid, current_user, current_setting(''search_path''))')},
	connstr => $op);
$node->safe_psql('app', q{SELECT outbox.append('who', 'evt.who.v1', '{}', '01890a5d-ac96-774b-bcce-b30209970001')},
	connstr => $op);
ok(wait_for($far, 'inbox', q{SELECT count(*) FROM seen}, '1', 30), 'the worker delivered the route');
is($far->safe_psql('inbox', q{SELECT who || ' ' || path FROM seen}), 'op_remote sneaky, public',
	"the worker delivered with the creator's mapping and its remote role's own search_path");
$node->safe_psql('app', q{SELECT outbox.unroute('who')});
$node->safe_psql('app', q{SELECT outbox.route_remote('who_drain', 'far',
	'INSERT INTO public.seen (id, who, path) VALUES (($1->>''id'')::uuid, current_user, current_setting(''search_path''))')},
	connstr => $op);
is($node->safe_psql('app', q{
	BEGIN;
	SELECT outbox.append('who_drain', 'evt.who.v1', '{}', '01890a5d-ac96-774b-bcce-b30209970002') IS NULL;
	SELECT outbox.drain_once('who_drain');
	COMMIT;
}), "f\n1", 'a superuser drains the operator\'s route');
is($far->safe_psql('inbox', q{SELECT who FROM seen WHERE id = '01890a5d-ac96-774b-bcce-b30209970002'}), 'op_remote',
	"a superuser's drain_once delivered with the creator's mapping too");
$node->safe_psql('app', q{SELECT outbox.unroute('who_drain')});

# The attack: the operator's command asks the remote server to connect back
# as the local superuser.  With the worker's superuser mapping it would have
# run; with the operator's own it is refused there, and op stays what it is.
my $escalate = "ALTER ROLE op SUPERUSER";
my $back = "host=$host port=$port dbname=app user=$su";
$node->safe_psql('app', "SELECT outbox.route_remote('climb', 'far', "
	  . lit("SELECT \$1, public.dblink_exec(" . lit($back) . ", " . lit($escalate) . ")") . ')',
	connstr => $op);
$node->safe_psql('app', q{SELECT outbox.append('climb', 'evt.climb.v1', '{}')}, connstr => $op);
ok(wait_for($node, 'app', q{SELECT last_error IS NOT NULL FROM outbox.message WHERE topic = 'climb'}, 't', 30),
	'the worker tried the route');
like($node->safe_psql('app', q{SELECT last_error FROM outbox.message WHERE topic = 'climb'}),
	qr/^2F003: password (is required|or GSSAPI delegated credentials required)/,
	'the remote server refused the connection back');
is($node->safe_psql('app', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'op'}), 'f', 'op is no superuser');
$node->safe_psql('app', q{SELECT outbox.unroute('climb')});

# The creator is checked again at each delivery.
$node->safe_psql('app', q{SELECT outbox.route_remote('checked', 'far',
	'INSERT INTO public.seen (id, who) VALUES (($1->>''id'')::uuid, current_user)')}, connstr => $op);
my @cases = (
	[ 'REVOKE USAGE ON FOREIGN SERVER far FROM op',
	  qr/^42501: permission denied for foreign server far/, 'revoked USAGE stops the route',
	  'GRANT USAGE ON FOREIGN SERVER far TO op' ],
	[ 'DROP USER MAPPING FOR op SERVER far',
	  qr/^28000: no user mapping for role "op" on server "far"/, 'a dropped mapping stops the route',
	  q{CREATE USER MAPPING FOR op SERVER far OPTIONS (user 'op_remote', password 'oppw')} ],
	[ 'ALTER ROLE op RENAME TO op_renamed',
	  qr/^42704: role "op" that made the route of topic "checked" does not exist\nHINT: Make the route again with outbox.route_remote\./,
	  'a renamed creator stops the route',
	  'ALTER ROLE op_renamed RENAME TO op' ]);
my $n = 0;
for my $case (@cases)
{
	my ($break, $error, $what, $mend) = @$case;
	$n++;
	my $id = sprintf('01890a5d-ac96-774b-bcce-b302099800%02d', $n);
	$node->safe_psql('app', $break);
	$node->safe_psql('app', "SELECT outbox.append('checked', 'evt.checked.v1', '{}', '$id')");
	ok(wait_for($node, 'app', "SELECT last_error IS NOT NULL FROM outbox.message WHERE id = '$id'", 't', 30),
		"$what: the worker tried");
	like($node->safe_psql('app', "SELECT last_error FROM outbox.message WHERE id = '$id'"), $error, $what);
	is($far->safe_psql('inbox', "SELECT count(*) FROM seen WHERE id = '$id'"), '0', "$what: nothing delivered");
	$node->safe_psql('app', $mend);
	ok(wait_for($node, 'app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id'", 't', 30),
		"$what: mended, the retry is delivered");
}

$node->stop;
$far->stop;
done_testing();
