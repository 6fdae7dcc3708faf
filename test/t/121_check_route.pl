# outbox.check_route(topic) against a real remote cluster: each of the
# errors that delivery would otherwise report one message at a time in
# last_error (an unknown host, no password, a missing table) shows in the
# step it belongs to, a healthy route passes every step, and nothing is
# ever delivered or run by a check.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $far = scram_node('far');
$far->safe_psql('postgres', q{
	CREATE ROLE op_remote LOGIN PASSWORD 'oppw';
	CREATE DATABASE inbox;
});
$far->safe_psql('inbox', q{
	CREATE TABLE public.event (id uuid, body jsonb);
	GRANT INSERT ON public.event TO op_remote;
	CREATE TABLE public.ran (at timestamptz DEFAULT now());
	CREATE FUNCTION public.mark(jsonb) RETURNS jsonb LANGUAGE sql
		AS $$ INSERT INTO public.ran DEFAULT VALUES RETURNING $1 $$;
	GRANT INSERT ON public.ran TO op_remote;
});

my $node = PostgreSQL::Test::Cluster->new('near');
$node->init;
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($far_host, $far_port) = ($far->host, $far->port);
$node->safe_psql('postgres', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER far FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$far_host', port '$far_port', dbname 'inbox');
	CREATE SERVER lost FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host 'no-such-host.invalid', port '5432', dbname 'inbox');
	CREATE ROLE op LOGIN;
	GRANT USAGE ON SCHEMA outbox TO op;
	GRANT EXECUTE ON FUNCTION outbox.route_remote(text, name, text), outbox.check_route(text) TO op;
	GRANT USAGE ON FOREIGN SERVER far, lost TO op;
	CREATE USER MAPPING FOR op SERVER far OPTIONS (user 'op_remote', password 'oppw');
	CREATE USER MAPPING FOR op SERVER lost OPTIONS (user 'op_remote', password 'oppw');
	CREATE USER MAPPING FOR $su SERVER far OPTIONS (user 'op_remote');
});
my $op = $node->connstr('postgres') . ' user=op';

# step|ok|sqlstate per row, and the message of the last row
sub check
{
	my ($topic, $connstr) = @_;
	my $rows = $node->safe_psql('postgres',
		"SELECT step || '|' || CASE WHEN ok THEN 't' ELSE 'f' END || '|' || coalesce(sqlstate, '') FROM outbox.check_route('$topic')",
		connstr => $connstr // $node->connstr('postgres'));
	my $last = $node->safe_psql('postgres',
		"SELECT message FROM outbox.check_route('$topic') WITH ORDINALITY AS c(s, o, q, message, n) ORDER BY n DESC LIMIT 1",
		connstr => $connstr // $node->connstr('postgres'));
	return ($rows, $last);
}

# a healthy route: every step passes, and the command is not run
$node->safe_psql('postgres', q{SELECT outbox.route_remote('good', 'far',
	'INSERT INTO event (id, body) SELECT ($1->>''id'')::uuid, mark($1)')}, connstr => $op);
my ($rows, $last) = check('good', $op);
is($rows, "route|t|\nserver|t|\nconnect|t|\nprepare|t|", 'a healthy route: route, server, connect and prepare pass');
like($last, qr/prepared remotely; it was not run/, 'the command was prepared, not run');
is($far->safe_psql('inbox', 'SELECT (SELECT count(*) FROM event)::text || (SELECT count(*) FROM ran)'), '00',
	'nothing was inserted and no function ran remotely');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.message'), '0', 'no message was made');
ok(wait_for($far, 'inbox', q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'krizaka_outbox'}, '0', 5),
	'and no remote session was left open');

# an unknown host: the connection fails
$node->safe_psql('postgres', q{SELECT outbox.route_remote('lost', 'lost', 'INSERT INTO event (body) VALUES ($1)')},
	connstr => $op);
($rows, $last) = check('lost', $op);
is($rows, "route|t|\nserver|t|\nconnect|f|08001", 'an unknown host: the connect step fails with 08001');
like($last, qr/^could not connect to server "lost": could not translate host name "no-such-host\.invalid"/,
	'and says the host name could not be translated');

# no password: the creator's mapping lost it after the route was made
$node->safe_psql('postgres', q{SELECT outbox.route_remote('nopw', 'far', 'INSERT INTO event (body) VALUES ($1)')},
	connstr => $op);
$node->safe_psql('postgres', q{ALTER USER MAPPING FOR op SERVER far OPTIONS (DROP password)});
($rows, $last) = check('nopw', $op);
is($rows, "route|t|\nserver|f|2F003", 'no password in the mapping of an ordinary role: the server step fails with 2F003');
like($last, qr/^password is required\nDETAIL: Non-superusers must provide a password in the user mapping\./,
	'and says a password is required');
$node->safe_psql('postgres', q{ALTER USER MAPPING FOR op SERVER far OPTIONS (ADD password 'oppw')});

# no password, as libpq reports it: a superuser's route whose mapping has
# none, to a server that asks for one
$node->safe_psql('postgres', q{SELECT outbox.route_remote('supw', 'far', 'INSERT INTO event (body) VALUES ($1)')});
($rows, $last) = check('supw');
is($rows, "route|t|\nserver|t|\nconnect|f|08001", 'no password for a server that asks for one: the connect step fails');
like($last, qr/fe_sendauth: no password supplied/, 'as libpq reports it');

# a missing table: the prepare step fails with the remote error
$node->safe_psql('postgres', q{SELECT outbox.route_remote('notable', 'far', 'INSERT INTO evnet (body) VALUES ($1)')},
	connstr => $op);
($rows, $last) = check('notable', $op);
is($rows, "route|t|\nserver|t|\nconnect|t|\nprepare|f|42P01", 'a missing table: the prepare step fails with 42P01');
like($last, qr/^relation "evnet" does not exist\n.*CONTEXT: remote command on server "far"/s, 'with the remote message');

# the limit of a check: the remote server checks privileges when a
# statement runs, not when it is prepared, so a right the remote role lacks
# does not show (the README says so)
$node->safe_psql('postgres', q{SELECT outbox.route_remote('noright', 'far', 'DELETE FROM event WHERE body = $1')},
	connstr => $op);
($rows) = check('noright', $op);
is($rows, "route|t|\nserver|t|\nconnect|t|\nprepare|t|", 'a missing privilege is not seen by prepare');

# NOTIFY routes, topics without a route, and other roles' routes
$node->safe_psql('postgres', q{SELECT outbox.route_notify('live', 'live_events')});
($rows) = check('live');
is($rows, "route|t|\nchannel|t|", 'a NOTIFY route: route and channel');
my ($ret, $out, $err) = $node->psql('postgres', q{SELECT * FROM outbox.check_route('none')});
like($err, qr/ERROR:  topic "none" has no route/, 'a topic without a route is an error');
($ret, $out, $err) = $node->psql('postgres', q{SELECT * FROM outbox.check_route('supw')}, connstr => $op);
like($err, qr/ERROR:  permission denied to check the route of topic "supw"/, "another role's route may not be checked");
is($far->safe_psql('inbox', 'SELECT (SELECT count(*) FROM event)::text || (SELECT count(*) FROM ran)'), '00',
	'no check ran anything remotely');

$node->stop;
$far->stop;
done_testing();
