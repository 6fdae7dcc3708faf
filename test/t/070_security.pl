# Security: the README's privilege recipe gives each role its part and
# nothing more; nobody without a grant sees payloads; a role that is not a
# superuser cannot make a remote route borrow the server's own identity
# (trust or peer authentication), neither when the route is made nor when it
# is delivered; the functions run no SQL built from their arguments
# (pg_stat_statements and auto_explain record only the fixed statements);
# everything works for a role whose search_path is empty, and objects that a
# role with CREATE on schema public puts there are never used.  Also: what
# CREATE EXTENSION and ALTER EXTENSION UPDATE leave granted, and a schema
# outbox made in advance by the database owner.
use strict;
use warnings;
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Time::HiRes qw(time usleep);

# --- helpers -----------------------------------------------------------------

my $node;

# Run $sql in $db as $user (the superuser when undef); return (rc, out, err).
sub run_as
{
	my ($user, $db, $sql) = @_;
	my $connstr = $node->connstr($db) . (defined $user ? " user=$user" : '');
	my ($out, $err);
	my $rc = $node->psql($db, $sql, connstr => $connstr, on_error_stop => 0,
		stdout => \$out, stderr => \$err);
	return ($rc, $out, $err);
}

# Run $sql in $db as $user; its output; the test dies if it fails.
sub safe_as
{
	my ($user, $db, $sql) = @_;
	my $connstr = $node->connstr($db) . (defined $user ? " user=$user" : '');
	return $node->safe_psql($db, $sql, connstr => $connstr);
}

# The grants on the extension's objects, one "object grantee privilege[*]"
# line each (* = with grant option), owners left out.
my $acl_query = q{
SELECT coalesce(string_agg(format('%s %s %s%s', o, CASE WHEN g = 0 THEN 'PUBLIC' ELSE g::regrole::text END,
                                  p, CASE WHEN go THEN '*' ELSE '' END), E'\n' ORDER BY o, g, p), '')
  FROM (SELECT 'schema' AS o, a.grantee AS g, a.privilege_type AS p, a.is_grantable AS go
          FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
         WHERE n.nspname = 'outbox' AND a.grantee <> n.nspowner
        UNION ALL
        SELECT c.relname::text, a.grantee, a.privilege_type, a.is_grantable
          FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
         WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'v') AND a.grantee <> c.relowner
        UNION ALL
        SELECT p.oid::regprocedure::text, a.grantee, a.privilege_type, a.is_grantable
          FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
         WHERE p.pronamespace = 'outbox'::regnamespace AND a.grantee <> p.proowner) x
};

# --- the clusters --------------------------------------------------------------

# The remote cluster: bob logs in with a SCRAM password; trustme is trusted
# and peeruser authenticated by peer, neither ever asked for a password.
my $osuser = getpwuid($<);
my $remote = PostgreSQL::Test::Cluster->new('remote');
$remote->init;
$remote->append_conf('postgresql.conf', qq{
password_encryption = 'scram-sha-256'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
});
$remote->start;
my $rsu = $remote->safe_psql('postgres', 'SELECT current_user');
$remote->safe_psql('postgres', q{
	CREATE ROLE bob LOGIN PASSWORD 'bobpw';
	CREATE ROLE trustme LOGIN;
	CREATE ROLE peeruser LOGIN;
	CREATE DATABASE inbox OWNER bob;
});
$remote->safe_psql('inbox', q{
	CREATE EXTENSION pg_stat_statements;
	SET ROLE bob;
	CREATE TABLE received (topic text NOT NULL, env jsonb NOT NULL);
	GRANT ALL ON received TO trustme, peeruser;
});
open my $hba, '>', $remote->data_dir . '/pg_hba.conf' or die $!;
print $hba "local all $rsu trust\nlocal all trustme trust\nlocal all peeruser peer map=obx\n"
  . "local all all scram-sha-256\n";
close $hba;
open my $ident, '>', $remote->data_dir . '/pg_ident.conf' or die $!;
print $ident "obx $osuser peeruser\n";
close $ident;
$remote->reload;

# The local cluster, with pg_stat_statements recording every statement,
# nested ones too.
$node = PostgreSQL::Test::Cluster->new('local');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pg_stat_statements, krizaka_outbox'
pg_stat_statements.track = all
pg_stat_statements.track_utility = on
pg_stat_statements.max = 10000
});
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($rhost, $rport) = ($remote->host, $remote->port);
my ($lhost, $lport) = ($node->host, $node->port);

$node->safe_psql('postgres', q{
	CREATE ROLE app_owner LOGIN CREATEROLE;
	CREATE ROLE app LOGIN;
	CREATE ROLE k_login LOGIN;
	CREATE ROLE o_login LOGIN;
	CREATE ROLE l_login LOGIN;
	CREATE ROLE c_login LOGIN;
	CREATE ROLE nobody LOGIN;
	CREATE ROLE sp_user LOGIN;
	CREATE ROLE bgw LOGIN;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE reporting LOGIN;
	CREATE DATABASE app OWNER app_owner;
	CREATE DATABASE inj;
	CREATE DATABASE hij;
});

# --- 1. what CREATE EXTENSION and ALTER EXTENSION UPDATE leave granted --------

# Installed at the first version and updated to the current one: the grants
# of the database owner follow every function the update adds.
$node->safe_psql('app', "CREATE EXTENSION krizaka_outbox VERSION '1.0'; CREATE EXTENSION dblink;");
my $owner_acl = sub {
	my @functions = split /\n/, $node->safe_psql('app',
		q{SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace ORDER BY 1});
	# the counters of HTTP routes (1.3) are the owner's to read; their
	# secrets are nobody's
	my $stats = $node->safe_psql('app', q{SELECT to_regclass('outbox.route_http_stats') IS NOT NULL}) eq 't';
	# and so are the subscriptions (1.4), their state and their statistics
	my $subs = $node->safe_psql('app', q{SELECT to_regclass('outbox.subscription') IS NOT NULL}) eq 't';
	my $frontier = $node->safe_psql('app', q{SELECT to_regclass('outbox.subscription_frontier') IS NOT NULL}) eq 't';
	# and the saved claim positions (1.5)
	my $positions = $node->safe_psql('app', q{SELECT to_regclass('outbox.claim_position') IS NOT NULL}) eq 't';
	# and the leases by range with the keys they hold (1.5)
	my $leases = $node->safe_psql('app', q{SELECT to_regclass('outbox.subscription_lease') IS NOT NULL}) eq 't';
	return join("\n", sort((map { "$_ app_owner EXECUTE*" } @functions),
		'message app_owner SELECT*', 'processed app_owner SELECT*', 'routes app_owner SELECT*',
		'schema app_owner USAGE*', 'topic_stats app_owner SELECT*',
		($stats ? ('route_http_stats app_owner SELECT*') : ()),
		($subs ? ('subscription app_owner SELECT*', 'subscription_state app_owner SELECT*',
			'subscription_stats app_owner SELECT*') : ()),
		($frontier ? ('subscription_frontier app_owner SELECT*') : ()),
		($positions ? ('claim_position app_owner SELECT*') : ()),
		($leases ? ('subscription_lease app_owner SELECT*', 'subscription_key app_owner SELECT*') : ())));
};
my $acl = $node->safe_psql('app', $acl_query);
is(join("\n", sort split /\n/, $acl), $owner_acl->(),
	'CREATE EXTENSION in a database of a non-superuser: the owner holds the grant options, nobody else anything');
unlike($acl, qr/ PUBLIC /, 'no privilege for PUBLIC after CREATE EXTENSION');
$node->safe_psql('app', q{ALTER EXTENSION krizaka_outbox UPDATE});
$acl = $node->safe_psql('app', $acl_query);
is(join("\n", sort split /\n/, $acl), $owner_acl->(),
	'ALTER EXTENSION UPDATE: the owner holds the grant options of everything, nobody else anything');
is($node->safe_psql('hij', "CREATE EXTENSION krizaka_outbox; $acl_query"), '',
	'CREATE EXTENSION in a database of a superuser: no privilege for anybody but the owner');

# A superuser whose default privileges hand out rights on everything it
# creates: the extension's objects get them too.
$node->safe_psql('postgres', 'CREATE DATABASE defprivs');
$node->safe_psql('defprivs', q{
	ALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO reporting;
	ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO reporting;
	ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO reporting;
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.append('t', 'evt.t.v1', '{"secret": "defprivs"}');
});
is($node->safe_psql('defprivs', $acl_query), '',
	'default privileges of the installing superuser grant nothing on the extension');
my ($rc, $out, $err) = run_as('reporting', 'defprivs', 'SELECT payload FROM outbox.message');
isnt($out, '{"secret": "defprivs"}', 'a role of those default privileges reads no payload');
$node->safe_psql('postgres', 'DROP DATABASE defprivs');

# --- 2. a schema outbox made in advance by the database owner -----------------

# The owner of a database may create a schema called outbox before a
# superuser installs the extension there.  If CREATE EXTENSION took that
# schema over, its owner could later rename it and put tables of its own
# in its place, which the extension's SECURITY DEFINER functions would then
# write as their owner, triggers included.
$node->safe_psql('postgres', 'CREATE DATABASE owned OWNER mallory');
safe_as('mallory', 'owned', 'CREATE SCHEMA outbox');
my ($crc, $cout, $cerr) = run_as(undef, 'owned', 'CREATE EXTENSION krizaka_outbox');
my $created = $cerr !~ /ERROR/;
my $schema_owner = $node->safe_psql('owned', q{SELECT nspowner::regrole FROM pg_namespace WHERE nspname = 'outbox'});
ok(!$created || $schema_owner ne 'mallory',
	'CREATE EXTENSION does not adopt a schema outbox owned by a role that is not a superuser')
  or diag("CREATE EXTENSION succeeded and schema outbox belongs to $schema_owner");
if ($created)
{
	run_as('mallory', 'owned', q{
		ALTER SCHEMA outbox RENAME TO outbox_taken;
		CREATE SCHEMA outbox;
		CREATE TABLE outbox.message (id uuid PRIMARY KEY, topic text, event_type text, payload jsonb,
			created_at timestamptz, available_at timestamptz, attempts int DEFAULT 0, leased_until timestamptz,
			lease_owner text, delivered_at timestamptz, dead_at timestamptz, last_error text);
		CREATE FUNCTION outbox.take() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			ALTER ROLE mallory SUPERUSER;
			RETURN NEW;
		END
		$$;
		CREATE TRIGGER take BEFORE INSERT ON outbox.message FOR EACH ROW EXECUTE FUNCTION outbox.take();
		SELECT outbox_taken.append('t', 'evt.t.v1', '{}');
	});
}
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f',
	'the owner of the database cannot become a superuser through the extension');
$node->safe_psql('postgres', 'ALTER ROLE mallory NOSUPERUSER; DROP DATABASE owned');

# --- 3. the recipe of docs/security.md, as written, by the non-superuser database owner ---

my $readme_path = dirname(__FILE__) . '/../../docs/security.md';
open my $readme_fh, '<', $readme_path or die "$readme_path: $!";
my $readme = do { local $/; <$readme_fh> };
close $readme_fh;
my ($security) = $readme =~ /^# Security\n(.*?)(?:^#{1,2} |\z)/ms;
my ($recipe) = ($security // '') =~ /```sql\n(.*?)```/s;
ok(defined $recipe, 'docs/security.md has a GRANT recipe');
$recipe //= '';

my ($rrc, $rout, $rerr) = run_as('app_owner', 'app', $recipe);
is($rerr, '', 'the recipe runs as written by the database owner (a role with CREATEROLE)');

# Whatever the recipe missed, so that the rest can go on: the listener role
# and its grant.  Nothing else is added.
safe_as('app_owner', 'app', q{
	DO $$
	BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_listener') THEN
			CREATE ROLE outbox_listener NOLOGIN;
		END IF;
	END
	$$;
	GRANT EXECUTE ON FUNCTION outbox.envelope_by_id(uuid) TO outbox_listener;
	GRANT outbox_worker TO k_login;
	GRANT outbox_operator TO o_login;
	GRANT outbox_listener TO l_login;
	GRANT outbox_consumer TO c_login;
	GRANT outbox_writer, outbox_consumer, outbox_worker, outbox_operator, outbox_listener TO sp_user;
});

# --- 4. each role can do its part and nothing more -----------------------------

$node->safe_psql('app', qq{
	CREATE FUNCTION public.obx_try(stmt text) RETURNS text LANGUAGE plpgsql AS \$\$
	BEGIN
		EXECUTE stmt;
		RETURN 'ok';
	EXCEPTION WHEN OTHERS THEN
		RETURN SQLSTATE;
	END
	\$\$;
	CREATE SERVER inbox FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$rhost', port '$rport', dbname 'inbox');
	CREATE SERVER inbox_trust FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$rhost', port '$rport', dbname 'inbox');
	CREATE SERVER inbox_peer FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$rhost', port '$rport', dbname 'inbox');
	CREATE SERVER self FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$lhost', port '$lport', dbname 'app');
	GRANT USAGE ON FOREIGN SERVER inbox, inbox_trust, inbox_peer, self TO outbox_operator;
	CREATE USER MAPPING FOR o_login SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	CREATE USER MAPPING FOR sp_user SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	CREATE TABLE public.self_hits (topic text);
	GRANT ALL ON public.self_hits TO PUBLIC;
	SELECT outbox.append('sec', 'evt.sec.v1', '{"secret": "s0"}', '00000000-0000-7000-8000-00000000f001', '2020-01-01');
});
my $id = '00000000-0000-7000-8000-00000000f001';

# What each role may do, with arguments that work.
my %part = (
	writer => {
		append => q{SELECT outbox.append('sec', 'evt.sec.v1', '{"secret": "s1"}')},
		append_batch => q{SELECT outbox.append_batch('sec', 'evt.sec.v1', ARRAY['{"secret": "s2"}']::jsonb[])},
	},
	consumer => { consume_once => qq{SELECT outbox.consume_once('c', '$id')}, },
	worker => {
		claim => q{SELECT outbox.envelope(c) FROM outbox.claim('k', 'nothing_due') c},
		extend => qq{SELECT outbox.extend('$id', 'k', 30)},
		complete => qq{SELECT outbox.complete('$id', 'k')},
		complete_many => qq{SELECT outbox.complete_many(ARRAY['$id'::uuid], 'k')},
		complete_and_claim => qq{SELECT count(*) FROM outbox.complete_and_claim(ARRAY['$id'::uuid], 'k', 'nothing_due')},
		fail => qq{SELECT outbox.fail('$id', 'k', 'e')},
		envelope => qq{SELECT outbox.envelope(ROW('$id', 't', 'e', '{}', now(), now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message)},
	},
	operator => {
		route_notify => q{SELECT outbox.route_notify('sec_n', 'sec_events')},
		route_remote => q{SELECT outbox.route_remote('sec_r', 'inbox', 'INSERT INTO public.received (topic, env) VALUES ($2, $1)')},
		# the calls run in name order: the route it checks is made first, as
		# route_remote below makes it again
		check_route => q{DO $$BEGIN
			PERFORM outbox.route_remote('sec_r', 'inbox', 'INSERT INTO public.received (topic, env) VALUES ($2, $1)');
			PERFORM count(*) FROM outbox.check_route('sec_r');
			END$$},
		unroute => q{SELECT outbox.unroute('no_such_topic')},
		retry_dead => qq{SELECT outbox.retry_dead('$id')},
		retry_dead_topic => q{SELECT outbox.retry_dead_topic('sec')},
		purge => q{SELECT outbox.purge('100 years')},
		drain_once => q{SELECT outbox.drain_once('no_such_topic')},
		worker_status => q{SELECT count(*) FROM outbox.worker_status()},
		'read routes' => q{SELECT count(*) FROM outbox.routes},
		'read topic_stats' => q{SELECT count(*) FROM outbox.topic_stats},
		route_http => q{SELECT outbox.route_http('sec_h', 'https://hooks.example.com/in', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')},
		rotate_http_secret => q{DO $$BEGIN
			PERFORM outbox.route_http('sec_h', 'https://hooks.example.com/in', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
			PERFORM outbox.rotate_http_secret('sec_h', 'whsec_VqIyEmit6FxShKaOks4ZT4b7o5FpYzmtFesZdFjsWzw=');
			END$$},
		webhook_signature => q{SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, '{}')},
		'read route_http_stats' => q{SELECT count(*) FROM outbox.route_http_stats},
		# named subscriptions (1.4): the calls run in name order, each makes
		# what it needs
		pause => q{DO $$BEGIN
			PERFORM outbox.subscribe('sec', 'sec_audit');
			PERFORM outbox.pause('sec', 'sec_audit');
			END$$},
		resume => q{SELECT outbox.resume('sec', 'sec_audit')},
		subscribe => q{SELECT outbox.subscribe('sec', 'sec_replay', '-infinity')},
		unsubscribe => q{SELECT outbox.unsubscribe('sec', 'sec_audit')},
		'read subscription_stats' => q{SELECT count(*) FROM outbox.subscription_stats},
	},
	listener => { envelope_by_id => qq{SELECT outbox.envelope_by_id('$id')}, },
	nobody => {},);
my %login = (writer => 'app', consumer => 'c_login', worker => 'k_login', operator => 'o_login', listener => 'l_login', nobody => 'nobody');
my @roles = qw(writer consumer worker operator listener nobody);

# Everything of the extension, found in the catalogs so that a new function
# or relation is covered as it comes: each is called (with NULL arguments)
# or read by each role.  Only the role's part may get past the privilege
# check; everything else is refused with 42501.
my $objects = $node->safe_psql('app', q{
	SELECT p.proname || E'\t' || format('SELECT outbox.%I(%s)', p.proname,
	           (SELECT coalesce(string_agg('NULL', ', '), '') FROM generate_series(1, p.pronargs)))
	  FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace
	UNION ALL
	SELECT 'read ' || c.relname || E'\t' || format('SELECT 1 FROM outbox.%I LIMIT 1', c.relname)
	  FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
	UNION ALL
	SELECT 'write ' || c.relname || E'\t' || format('DELETE FROM outbox.%I', c.relname)
	  FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r'
	ORDER BY 1});
my @objects = map { [ split /\t/ ] } split /\n/, $objects;
cmp_ok(scalar(@objects), '>=', 25, 'every function and relation of outbox is in the matrix');

for my $role (@roles)
{
	my (@got, @want);
	my $sql = '';
	for my $o (@objects)
	{
		$sql .= 'SELECT public.obx_try(' . lit($o->[1]) . ");\n";
		push @want, "$o->[0]: " . (exists $part{$role}{ $o->[0] } ? 'allowed' : '42501');
	}
	my @out = split /\n/, safe_as($login{$role}, 'app', $sql);
	for my $i (0 .. $#objects)
	{
		push @got, "$objects[$i][0]: " . (exists $part{$role}{ $objects[$i][0] } && $out[$i] ne '42501' ? 'allowed' : $out[$i] eq '42501' ? '42501' : "$out[$i] (not refused)");
	}
	is(join("\n", @got), join("\n", @want), "$role ($login{$role}): only its part gets past the privilege checks");

	# and its part works with real arguments
	my @calls = sort keys %{ $part{$role} };
	next unless @calls;
	my $calls = join('', map { 'SELECT public.obx_try(' . lit($part{$role}{$_}) . ");\n" } @calls);
	is(safe_as($login{$role}, 'app', $calls), join("\n", map { 'ok' } @calls),
		"$role ($login{$role}): " . join(', ', @calls) . ' succeed');
}

# Nobody but the worker (what it claims) and the listener (by id) sees a
# payload; what the operator may read holds none.
like(safe_as('k_login', 'app', q{SELECT outbox.envelope(c)->>'payload' FROM outbox.claim('k', 'sec', 1) c}),
	qr/secret/, 'the worker sees the payload of what it claims');
is(safe_as('l_login', 'app', qq{SELECT outbox.envelope_by_id('$id') IS NULL}), 't',
	'the listener reads no envelope of a topic that is not routed to a channel');
$node->safe_psql('app', q{
	SELECT outbox.route_notify('sec_live', 'sec_live_events');
	SELECT outbox.append('sec_live', 'evt.sec.v1', '{"secret": "n0"}', '00000000-0000-7000-8000-00000000f0a0');
});
my ($lrc, $lout, $lerr) = run_as('l_login', 'app', q{SELECT outbox.envelope_by_id('00000000-0000-7000-8000-00000000f0a0')->'payload'});
like($lout, qr/"secret": "n0"/, 'the listener reads an envelope of a NOTIFY topic by id') or diag($lerr);
$node->safe_psql('app', q{SELECT outbox.unroute('sec_live'); DELETE FROM outbox.message WHERE topic = 'sec_live'});
unlike(safe_as('o_login', 'app', q{SELECT row_to_json(r) FROM outbox.routes r UNION ALL SELECT row_to_json(s) FROM outbox.topic_stats s}),
	qr/"secret":|whsec_/, 'the routes and the statistics show no payload and no webhook secret to the operator');
# the planner's statistics of the tables hold their values: nobody may read them
$node->safe_psql('app', 'ANALYZE outbox.message, outbox.processed');
for my $role (@roles)
{
	is(safe_as($login{$role}, 'app', q{SELECT count(*) FROM pg_stats WHERE schemaname = 'outbox'}), '0',
		"$role: no statistics of the outbox tables in pg_stats");
}

# --- 5. no route borrows the server's own identity ------------------------------

my $cmd = 'INSERT INTO public.received (topic, env) VALUES ($2, $1)';
my $self_cmd = 'INSERT INTO public.self_hits (topic) SELECT $2 WHERE $1 IS NOT NULL';
$node->safe_psql('app', qq{
	CREATE USER MAPPING FOR o_login SERVER inbox_trust OPTIONS (user 'trustme');
	CREATE USER MAPPING FOR o_login SERVER inbox_peer OPTIONS (user 'peeruser');
	CREATE USER MAPPING FOR o_login SERVER self OPTIONS (user '$su');
});

# at route creation: no password in the mapping, no route
for my $server (qw(inbox_trust inbox_peer self))
{
	my $c = $server eq 'self' ? $self_cmd : $cmd;
	my ($rc, $out, $err) = run_as('o_login', 'app',
		"\\set VERBOSITY verbose\nSELECT outbox.route_remote('id_$server', '$server', " . lit($c) . ')');
	like($err, qr/2F003: password is required.*Non-superusers must provide a password in the user mapping\./s,
		"operator: no route to $server without a password in the mapping");
}
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.routes WHERE topic LIKE 'id\_%'}), '0',
	'and none was stored');

# at delivery: a password the server never asks for does not help
$node->safe_psql('app', q{
	ALTER USER MAPPING FOR o_login SERVER inbox_trust OPTIONS (ADD password 'never-asked');
	ALTER USER MAPPING FOR o_login SERVER inbox_peer OPTIONS (ADD password 'never-asked');
	ALTER USER MAPPING FOR o_login SERVER self OPTIONS (ADD password 'never-asked');
});
for my $server (qw(inbox_trust inbox_peer self))
{
	my $c = $server eq 'self' ? $self_cmd : $cmd;
	safe_as('o_login', 'app', "SELECT outbox.route_remote('id_$server', '$server', " . lit($c) . ')');
	$node->safe_psql('app', "SELECT outbox.append('id_$server', 'evt.id.v1', '{}')");
	is(safe_as('o_login', 'app', "SELECT outbox.drain_once('id_$server')"), '0',
		"operator: drain_once delivers nothing through $server");
	like($node->safe_psql('app', "SELECT last_error FROM outbox.message WHERE topic = 'id_$server'"),
		qr/^2F003: password is required\nDETAIL: Non-superuser cannot connect if the server does not request a password\./,
		"operator: $server did not ask for the password, so the connection was refused");
}

# a superuser draining a route that an operator made: the operator's mapping,
# and still a password the server must ask for
$node->safe_psql('app', qq{
	CREATE USER MAPPING FOR $su SERVER inbox_trust OPTIONS (user 'trustme');
	CREATE USER MAPPING FOR $su SERVER self OPTIONS (user '$su');
	UPDATE outbox.message SET available_at = now(), leased_until = NULL WHERE topic LIKE 'id\\_%';
});
for my $server (qw(inbox_trust self))
{
	is($node->safe_psql('app', "SELECT outbox.drain_once('id_$server')"), '0',
		"superuser: drain_once of the operator's route through $server delivers nothing");
	like($node->safe_psql('app', "SELECT last_error FROM outbox.message WHERE topic = 'id_$server'"),
		qr/^2F003: password is required\nDETAIL: Non-superuser cannot connect if the server does not request a password\./,
		"superuser: the operator's route through $server is delivered with the operator's mapping, and refused");
}

# the same operator, with a password the server does ask for, delivers
safe_as('o_login', 'app', 'SELECT outbox.route_remote(' . join(', ', map { lit($_) } 'id_scram', 'inbox', $cmd) . ')');
$node->safe_psql('app', q{SELECT outbox.append('id_scram', 'evt.id.v1', '{"n": 1}')});
is(safe_as('o_login', 'app', q{SELECT outbox.drain_once('id_scram')}), '1', 'operator: a route over SCRAM is delivered');
is($remote->safe_psql('inbox', q{SELECT env->'payload' FROM received WHERE topic = 'id_scram'}), '{"n": 1}',
	'and the row arrived');
$node->safe_psql('app', q{SELECT outbox.unroute('id_scram')});

# the background worker (a role that is not a superuser) delivering the
# operator's route through the local server's trust
$node->safe_psql('app', q{
	CREATE USER MAPPING FOR bgw SERVER self OPTIONS (user 'bgw', password 'never-asked');
	GRANT USAGE ON FOREIGN SERVER self TO bgw;
	ALTER ROLE bgw IN DATABASE app SET search_path = '';
	ALTER ROLE bgw IN DATABASE hij SET search_path = public, pg_catalog;
	UPDATE outbox.message SET available_at = now(), leased_until = NULL, last_error = NULL WHERE topic = 'id_self';
});
$node->append_conf('postgresql.conf', "outbox.worker_databases = 'app, hij'\noutbox.worker_role = 'bgw'\n");
$node->reload;
ok(wait_for($node, 'app', q{SELECT last_error IS NOT NULL FROM outbox.message WHERE topic = 'id_self'}, 't', 30),
	'the worker tried the route through self');
like($node->safe_psql('app', q{SELECT last_error FROM outbox.message WHERE topic = 'id_self'}),
	qr/^2F003: password is required\nDETAIL: Non-superuser cannot connect if the server does not request a password\./,
	'worker: the local server did not ask for the password, so the connection was refused');
is($node->safe_psql('app', 'SELECT count(*) FROM public.self_hits'), '0', 'no command ran through self');
is($remote->safe_psql('inbox', q{SELECT count(*) FROM received WHERE topic LIKE 'id\_%' AND topic <> 'id_scram'}), '0',
	'no command ran on the remote side');
$node->safe_psql('app', q{DELETE FROM outbox.message WHERE topic LIKE 'id\_%'; DELETE FROM outbox.routes WHERE topic LIKE 'id\_%'});

# --- 6. no SQL is built from the arguments -------------------------------------

# Each injected string carries a marker (obxinj) that must never show up in a
# statement's text.  The strings reach the functions only as values read
# from a table, so that no statement of this test contains them either.
my @inject = (
	q{a' OR '1'='1 /*obxinj01*/},
	q{'); DELETE FROM outbox.message; --obxinj02},
	q{x"; SELECT 1 /*obxinj03*/ --"},
	q{$$ || obxinj04() || $$},
	q{\\'; obxinj05 \\},
	q{obxinj06 %s %I %L %n %1$s},
	q{$1 obxinj07 $2},
	q{*/ obxinj08 /*},
	q{obxinj09'::text); SET ROLE nobody; SELECT ('},
	q{ünïcødé obxinj10 ✓},
	q{obxinj11_valid_channel},
	q{SELECT $1 /*obxinj12*/},
	q{E'\\x27' obxinj13},
	"obxinj14 line\nbreak",
	'obxinj15 ' . ('x' x 200),
	"obxinj16 tab\there",);
my $copy = join('', map { my $s = $inject[$_]; $s =~ s/\\/\\\\/g; $s =~ s/\n/\\n/g; $s =~ s/\t/\\t/g; ($_ + 1) . "\t$s\n" } 0 .. $#inject);
$node->safe_psql('inj', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE EXTENSION pg_stat_statements;
	CREATE SERVER inbox FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$rhost', port '$rport', dbname 'inbox');
	CREATE USER MAPPING FOR $su SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	CREATE TABLE public.inj (n int PRIMARY KEY, p text NOT NULL);
	CREATE TABLE public.inj_out (n int, step text, outcome text);
	COPY public.inj FROM STDIN;
$copy\\.
});
is($node->safe_psql('inj', q{SELECT count(*) FROM public.inj WHERE p LIKE '%obxinj%'}), scalar(@inject),
	'the injected strings are loaded');
$node->safe_psql('inj', 'SELECT pg_stat_statements_reset()');
$remote->safe_psql('inbox', 'SELECT pg_stat_statements_reset()');

# One step: a PL/pgSQL block that runs $stmt and records 'ok' or the SQLSTATE.
my @step_names;
sub step
{
	my ($name, $stmt) = @_;
	push @step_names, $name;
	return qq{
		BEGIN
			$stmt;
			INSERT INTO public.inj_out VALUES (r.n, '$name', 'ok');
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO public.inj_out VALUES (r.n, '$name', SQLSTATE);
		END;};
}
my $remote_cmd = 'INSERT INTO public.received (topic, env) VALUES ($2, $1)';
my $steps = join('',
	step('append', 'id1 := outbox.append(r.p, r.p, jsonb_build_object(r.p, r.p))'),
	step('append again', 'PERFORM outbox.append(r.p, r.p, jsonb_build_object(r.p, r.p), id1)'),
	step('append other', q{PERFORM outbox.append(r.p, r.p, jsonb_build_object('other', r.p), id1)}),
	step('append payload', q{id2 := outbox.append('inj', 'evt.inj.v1', jsonb_build_object('k', r.p, r.p, 'v'))}),
	step('append_batch', 'ids := ARRAY(SELECT outbox.append_batch(r.p, r.p, ARRAY[to_jsonb(r.p), jsonb_build_array(r.p)]))'),
	step('consume_once', 'PERFORM outbox.consume_once(r.p, id2)'),
	step('consume_once again', 'PERFORM outbox.consume_once(r.p, id2)'),
	step('route_notify', q{PERFORM outbox.route_notify(r.p, 'obx_inj_events')}),
	step('route_notify channel', q{PERFORM outbox.route_notify('inj_channel', r.p)}),
	step('drain_once notify', 'n := outbox.drain_once(r.p); IF n <> 3 THEN RAISE EXCEPTION USING ERRCODE = \'P0001\', MESSAGE = n::text; END IF'),
	step('route_remote', 'PERFORM outbox.route_remote(r.p, \'inbox\', ' . lit($remote_cmd) . ')'),
	step('append remote', 'id4 := outbox.append(r.p, r.p, jsonb_build_object(r.p, r.p))'),
	step('drain_once remote', 'n := outbox.drain_once(r.p); IF n <> 1 THEN RAISE EXCEPTION USING ERRCODE = \'P0002\', MESSAGE = n::text; END IF'),
	step('route_remote server', 'PERFORM outbox.route_remote(\'inj_server\', r.p::name, ' . lit($remote_cmd) . ')'),
	step('route_remote command', q{PERFORM outbox.route_remote('inj_command', 'inbox', r.p)}),
	step('unroute', 'PERFORM outbox.unroute(r.p)'),
	step('append lease', 'id3 := outbox.append(r.p, r.p, jsonb_build_object(r.p, r.p))'),
	step('claim', 'PERFORM outbox.envelope(c) FROM outbox.claim(r.p, r.p, 10) c'),
	step('extend', 'PERFORM outbox.extend(id3, r.p, 30)'),
	step('fail', 'PERFORM outbox.fail(id3, r.p, r.p)'),
	step('complete', 'PERFORM outbox.complete(id3, r.p)'),
	step('append lease 2', 'id5 := outbox.append(r.p, r.p, jsonb_build_object(r.p, r.p))'),
	step('claim 2', 'PERFORM outbox.claim(r.p, r.p, 10)'),
	step('complete_many', 'PERFORM outbox.complete_many(ARRAY[id5], r.p)'),
	step('claim dead', 'PERFORM outbox.claim(r.p, r.p, 10)'),
	step('fail dead', 'PERFORM outbox.fail(id3, r.p, r.p)'),
	step('retry_dead', 'PERFORM outbox.retry_dead(id3)'),
	step('retry_dead_topic', 'PERFORM outbox.retry_dead_topic(r.p)'),
	step('envelope_by_id', 'PERFORM outbox.envelope_by_id(id1)'));
my $do = qq{
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_format = json;
SET outbox.max_attempts = 1;
SET outbox.backoff_seconds = 1;
DO \$do\$
DECLARE
	r record;
	n int;
	id1 uuid;
	id2 uuid;
	id3 uuid;
	id4 uuid;
	id5 uuid;
	ids uuid[];
BEGIN
	FOR r IN SELECT i.n, i.p FROM public.inj i ORDER BY i.n LOOP
		id1 := NULL; id2 := NULL; id3 := NULL; id4 := NULL; id5 := NULL; ids := NULL;
$steps
	END LOOP;
END
\$do\$;
SELECT outbox.purge('0');
SELECT outbox.drain_once();
};
my $log_start = -s $node->logfile;
$node->safe_psql('inj', $do);

# what happened to each string: a name the checks refuse gets 22023 at
# every step that takes it as a name; the others get through
my %names_ok = map { $_ + 1 => ($inject[$_] !~ /[\x00-\x1f]/ && length($inject[$_]) <= 200) } 0 .. $#inject;
my %outcomes;
for my $row (split /\n/, $node->safe_psql('inj', q{SELECT n || '|' || step || '|' || outcome FROM public.inj_out ORDER BY n}))
{
	my ($n, $st, $outcome) = split /\|/, $row;
	$outcomes{$n}{$st} = $outcome;
}
for my $n (sort { $a <=> $b } keys %names_ok)
{
	my (@got, @want);
	for my $st (@step_names)
	{
		my $want;
		if ($st eq 'append payload')
		{
			$want = 'ok';
		}
		elsif ($st eq 'route_notify channel')
		{
			$want = $inject[ $n - 1 ] =~ /^[a-z_][a-z0-9_\$]*$/ ? 'ok' : '22023';
		}
		elsif ($st eq 'route_remote server')
		{
			$want = '42704';
		}
		elsif ($st eq 'route_remote command')
		{
			$want = $inject[ $n - 1 ] =~ /^SELECT \$1/ ? 'ok' : '22023';
		}
		elsif (!$names_ok{$n})
		{
			$want = $st =~ /^(extend|fail|complete|complete_many|retry_dead|envelope_by_id|fail dead)$/ ? 'ok|22004|22023' : '22023';
		}
		elsif ($st eq 'append other')
		{
			$want = '23505';
		}
		else
		{
			$want = 'ok';
		}
		my $got = $outcomes{$n}{$st} // 'missing';
		push @got, "$st: " . ($got =~ /^(?:$want)$/ ? $want : $got);
		push @want, "$st: $want";
	}
	is(join("\n", @got), join("\n", @want), "injected string $n: every step ends as the checks say");
}
is($node->safe_psql('inj', q{SELECT count(*) FROM public.inj_out WHERE outcome ~ '^(42|XX|2F|P0)' AND outcome <> '42704'}), '0',
	'no step ended in a syntax, name, privilege or internal error');

# the strings went through as data, unchanged
my @valid = grep { $names_ok{$_} } sort { $a <=> $b } keys %names_ok;
is($node->safe_psql('inj', q{
	SELECT count(DISTINCT i.n) FROM public.inj i JOIN outbox.message m
	    ON m.topic = i.p AND m.event_type = i.p AND m.payload ->> i.p = i.p}), scalar(@valid),
	'every valid string is stored as topic, type and payload exactly');
is($node->safe_psql('inj', q{
	SELECT count(*) FROM public.inj i JOIN outbox.message m
	    ON m.topic = 'inj' AND m.payload ->> 'k' = i.p AND m.payload ->> i.p = 'v'}), scalar(@inject),
	'every string is stored in a payload exactly');
my $received = $remote->safe_psql('inbox', q{SELECT topic || E'\x01' || (env->>'type') || E'\x01' || (env->'payload'->>topic) FROM received WHERE topic <> 'id_scram' ORDER BY topic});
is(join("\n", sort split /\n/, $received),
	join("\n", sort map { "$inject[$_-1]\x01$inject[$_-1]\x01$inject[$_-1]" } @valid),
	'the remote side received each valid string as the topic ($2) and inside the envelope ($1)');

# pg_stat_statements: not one statement, here or there, holds a marker, and
# every statement the extension ran on its tables is a parameterised one
# (but for the one fixed text that reads the routed topics)
is($node->safe_psql('inj', q{SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%obxinj%'}), '0',
	'pg_stat_statements: no statement text holds an injected string');
is($node->safe_psql('inj', q{
	SELECT string_agg(query, E'\n') FROM pg_stat_statements
	 WHERE NOT toplevel AND query ~ 'outbox\.(message|processed|routes)\M' AND query !~ '\$1\M'
	   AND query <> 'SELECT topic FROM outbox.routes'}), '',
	'pg_stat_statements: every nested statement on the outbox tables takes parameters');
cmp_ok($node->safe_psql('inj', q{
	SELECT count(*) FROM pg_stat_statements
	 WHERE NOT toplevel AND query ~ 'outbox\.(message|processed|routes)\M'}), '>=', 15,
	'pg_stat_statements recorded the nested statements of the extension');
is($remote->safe_psql('inbox', q{SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%obxinj%'}), '0',
	'pg_stat_statements of the remote side: no statement text holds an injected string');
is($remote->safe_psql('inbox', q{SELECT string_agg(DISTINCT query, ' | ') FROM pg_stat_statements WHERE userid = 'bob'::regrole}),
	$remote_cmd, 'the remote side ran only the route\'s command, with its parameters');

# auto_explain logged the text of every statement as it was run (constants
# not replaced): none holds a marker, and every one on the outbox tables is
# a text compiled into the library
open my $logfh, '<', $node->logfile or die $!;
seek $logfh, $log_start, 0;
my $log = do { local $/; <$logfh> };
close $logfh;
my @texts;
while ($log =~ /"Query Text": "((?:[^"\\]|\\.)*)"/g)
{
	my $t = $1;
	$t =~ s/\\n/\n/g;
	$t =~ s/\\t/\t/g;
	$t =~ s/\\(["\\\/])/$1/g;
	push @texts, $t;
}
cmp_ok(scalar(@texts), '>', 100, 'auto_explain logged the statements run');
is(join("\n", grep { /obxinj/ } @texts), '', 'auto_explain: no statement text holds an injected string');
my $libdir = $node->config_data('--pkglibdir');
open my $sofh, '<:raw', "$libdir/krizaka_outbox.so" or die $!;
my $so = do { local $/; <$sofh> };
close $sofh;
my %foreign;
for my $t (grep { /\boutbox\.(?:message|processed|routes)\b/ } @texts)
{
	$foreign{$t} = 1 if index($so, $t) < 0;
}
is(join("\n---\n", sort keys %foreign), '',
	'auto_explain: every statement on the outbox tables is a fixed text of the library');

# --- 7. an empty search_path ---------------------------------------------------

# sp_user holds every role of the recipe and has an empty search_path: it
# calls everything schema-qualified, in a database without a worker (inj) so
# that the outcomes are its own.
$node->safe_psql('inj', q{
	ALTER ROLE sp_user SET search_path = '';
	GRANT USAGE ON SCHEMA outbox TO sp_user;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox TO sp_user;
	GRANT SELECT ON outbox.routes, outbox.topic_stats TO sp_user;
	GRANT USAGE ON FOREIGN SERVER inbox TO sp_user;
	CREATE USER MAPPING FOR sp_user SERVER inbox OPTIONS (user 'bob', password 'bobpw');
});
my $e = '00000000-0000-7000-8000-00000000e001';
my @sp = (
	[ 'SHOW search_path', '""' ],
	[ q{SELECT outbox.route_notify('sp', 'sp_events')}, '' ],
	[ q{SELECT outbox.route_remote('sp_remote', 'inbox', 'INSERT INTO public.received (topic, env) VALUES ($2, $1)')}, '' ],
	[ q{SELECT outbox.append('sp', 'evt.sp.v1', '{"sp": 1}', '00000000-0000-7000-8000-00000000e0a1') IS NOT NULL}, 't' ],
	[ q{SELECT pg_catalog.count(*) FROM outbox.append_batch('sp', 'evt.sp.v1', ARRAY['{"sp": 2}', '{"sp": 3}']::pg_catalog.jsonb[])}, '2' ],
	[ q{SELECT outbox.append('sp_remote', 'evt.sp.v1', '{"sp": 4}') IS NOT NULL}, 't' ],
	[ qq{SELECT outbox.append('sp_pull', 'evt.sp.v1', '{"sp": 5}', '$e', '2000-01-01')}, $e ],
	[ qq{SELECT outbox.consume_once('c', '$e')}, 't' ],
	[ q{SELECT outbox.drain_once('sp')}, '3' ],
	[ q{SELECT outbox.drain_once('sp_remote')}, '1' ],
	[ q{SELECT outbox.envelope(c) OPERATOR(pg_catalog.->>) 'id' FROM outbox.claim('w', 'sp_pull', 1) c}, $e ],
	[ qq{SELECT outbox.extend('$e', 'w', 30)}, 't' ],
	[ qq{SELECT outbox.fail('$e', 'w', 'once')}, 't' ],
	[ qq{SELECT outbox.complete('$e', 'w')}, 'f' ],
	[ q{SELECT outbox.complete_many(ARRAY(SELECT outbox.append('sp_pull2', 'evt.sp.v1', '{}')), 'w')}, '0' ],
	[ qq{SELECT outbox.retry_dead('$e')}, 'f' ],
	[ q{SELECT outbox.retry_dead_topic('sp_pull')}, '0' ],
	[ q{SELECT outbox.purge('100 years')}, '0' ],
	[ q{SELECT outbox.envelope_by_id('00000000-0000-7000-8000-00000000e0a1') OPERATOR(pg_catalog.->) 'payload'}, '{"sp": 1}' ],
	[ qq{SELECT outbox.envelope_by_id('$e') IS NULL}, 't' ],
	[ q{SELECT pg_catalog.count(*) IS NOT NULL FROM outbox.worker_status()}, 't' ],
	[ q{SELECT delivered FROM outbox.topic_stats WHERE topic OPERATOR(pg_catalog.=) 'sp'}, '3' ],
	[ q{SELECT outbox.unroute('sp_remote')}, 't' ],);
my @sp_out = split /\n/, safe_as('sp_user', 'inj', join(";\n", map { $_->[0] } @sp) . ";\n"), -1;
is(join("\n", map { "$sp[$_][0] -> " . ($sp_out[$_] // 'missing') } 0 .. $#sp),
	join("\n", map { "$_->[0] -> $_->[1]" } @sp),
	'an empty search_path: every function and view, schema-qualified, does its work');
is($remote->safe_psql('inbox', q{SELECT env->'payload' FROM received WHERE topic = 'sp_remote'}), '{"sp": 4}',
	'drain_once delivered the remote route with an empty search_path');

# the worker of app runs as bgw, whose search_path is empty there
safe_as('sp_user', 'app', q{
	SELECT outbox.route_notify('sp_worker', 'sp_events');
	SELECT outbox.append('sp_worker', 'evt.sp.v1', '{"sp": 6}');
});
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE topic = 'sp_worker' AND delivered_at IS NOT NULL}, '1', 30),
	'the worker, whose search_path is empty, delivers a NOTIFY route');

# --- 8. objects in schema public named like ours --------------------------------

# mallory may create in public; every object she makes records that it was
# used.  Then the extension is installed, updated and used by a superuser,
# an ordinary role and the worker, with public first on their search_path.
$node->safe_psql('hij', q{
	DROP EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	GRANT CREATE ON SCHEMA public TO mallory;
});
my $hostile = q{
	CREATE TABLE public.hijack_log (who text, what text);
	GRANT INSERT ON public.hijack_log TO PUBLIC;
	CREATE TABLE public.message (LIKE pg_catalog.pg_class);
	CREATE TABLE public.processed (consumer text, message_id uuid);
	CREATE TABLE public.routes (topic text, target text, channel text, server name, command text, created_by name);
	INSERT INTO public.routes VALUES ('h', 'notify', 'hijacked', NULL, NULL, 'postgres');
};
my @fns = (
	[ 'now', '', 'timestamptz', q{'2000-01-01'::timestamptz} ],
	[ 'clock_timestamp', '', 'timestamptz', q{'2000-01-01'::timestamptz} ],
	[ 'format', 'text, text, integer, integer', 'text', q{'hijacked'::text} ],
	[ 'format', 'text, anyelement', 'text', q{'hijacked'::text} ],
	[ 'pg_notify', 'text, text', 'void', 'NULL::void' ],
	[ 'int4larger', 'integer, integer', 'integer', '100' ],
	[ 'unnest', 'uuid[]', 'SETOF uuid', q{'00000000-0000-0000-0000-000000000000'::uuid} ],
	[ 'unnest', 'jsonb[]', 'SETOF jsonb', q{'"hijacked"'::jsonb} ],
	[ 'jsonb_build_object', 'text, text', 'jsonb', q{'{}'::jsonb} ],
	[ 'to_jsonb', 'text', 'jsonb', q{'"hijacked"'::jsonb} ],
	[ 'min', 'timestamptz', 'timestamptz', 'NULL::timestamptz' ],
	[ 'gen_random_uuid', '', 'uuid', q{'00000000-0000-0000-0000-000000000000'::uuid} ],
	[ 'isfinite', 'timestamptz', 'boolean', 'false' ],
	[ 'evil_eq', 'text, text', 'boolean', 'true' ],
	[ 'evil_eq', 'uuid, uuid', 'boolean', 'true' ],
	[ 'evil_eq', 'jsonb, jsonb', 'boolean', 'true' ],
	[ 'evil_eq', 'name, name', 'boolean', 'true' ],
	[ 'evil_eq', 'integer, integer', 'boolean', 'true' ],
	[ 'evil_tstz', 'timestamptz, timestamptz', 'boolean', 'true' ],
	[ 'evil_int', 'integer, integer', 'integer', '100' ],);
for my $f (@fns)
{
	my ($name, $args, $ret, $value) = @$f;
	$hostile .= "CREATE FUNCTION public.$name($args) RETURNS $ret LANGUAGE sql VOLATILE AS "
	  . "\$f\$ INSERT INTO public.hijack_log VALUES (current_user, '$name($args)'); SELECT $value \$f\$;\n";
}
$hostile .= q{
	CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.evil_eq);
	CREATE OPERATOR public.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = public.evil_eq);
	CREATE OPERATOR public.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = public.evil_eq);
	CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = name, FUNCTION = public.evil_eq);
	CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.evil_tstz);
	CREATE OPERATOR public.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.evil_tstz);
	CREATE OPERATOR public.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.evil_tstz);
	CREATE OPERATOR public.>= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_eq);
	CREATE OPERATOR public.+ (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_int);
	CREATE OPERATOR public.- (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_int);
};
safe_as('mallory', 'hij', $hostile);
is($node->safe_psql('hij', q{SET search_path = public, pg_catalog; SELECT 1 + 1, 'a'::text = 'b'::text}), '100|t',
	'the hostile objects are in force for plain SQL with public first on the search_path');
$node->safe_psql('hij', 'TRUNCATE public.hijack_log');

$node->safe_psql('hij', qq{
	SET search_path = public, pg_catalog;
	CREATE EXTENSION krizaka_outbox VERSION '1.0';
	ALTER EXTENSION krizaka_outbox UPDATE;
	CREATE SERVER inbox FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$rhost', port '$rport', dbname 'inbox');
	CREATE USER MAPPING FOR sp_user SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	CREATE USER MAPPING FOR bgw SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	-- for the drain_once below, which races with the worker for the message
	CREATE USER MAPPING FOR CURRENT_USER SERVER inbox OPTIONS (user 'bob', password 'bobpw');
	GRANT USAGE ON FOREIGN SERVER inbox TO sp_user, bgw;
	GRANT USAGE ON SCHEMA outbox TO sp_user;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox TO sp_user;
	GRANT SELECT ON outbox.routes, outbox.topic_stats TO sp_user;
	ALTER ROLE sp_user IN DATABASE hij SET search_path = public, pg_catalog;
});
my $d = '00000000-0000-7000-8000-00000000d00';
my @h = (
	[ 'SHOW search_path', 'public, pg_catalog' ],
	[ q{SELECT outbox.route_notify('h', 'h_events')}, '' ],
	[ q{SELECT outbox.route_remote('h_remote', 'inbox', 'INSERT INTO public.received (topic, env) VALUES ($2, $1)')}, '' ],
	[ qq{SELECT outbox.append('h', 'evt.h.v1', '{"h": 1}', '${d}1')}, "${d}1" ],
	[ qq{SELECT outbox.append('h', 'evt.h.v1', '{"h": 1}', '${d}1')}, "${d}1" ],
	[ q{SELECT count(*) FROM outbox.append_batch('h', 'evt.h.v1', ARRAY['{"h": 2}']::jsonb[])}, '1' ],
	[ qq{SELECT outbox.append('h_remote', 'evt.h.v1', '{"h": 3}', '${d}3')}, "${d}3" ],
	[ qq{SELECT outbox.append('h_pull', 'evt.h.v1', '{"h": 4}', '${d}4', '2000-01-01')}, "${d}4" ],
	[ qq{SELECT outbox.consume_once('c', '${d}1')}, 't' ],
	[ q{SELECT outbox.drain_once('h_remote') IS NOT NULL}, 't' ],
	[ q{SELECT outbox.envelope(c) -> 'id' FROM outbox.claim('w', 'h_pull', 5) c}, qq{"${d}4"} ],
	[ qq{SELECT outbox.complete('${d}4', 'intruder')}, 'f' ],
	[ qq{SELECT outbox.extend('${d}4', 'w', 30)}, 't' ],
	[ qq{SELECT outbox.fail('${d}4', 'w', 'once')}, 't' ],
	[ qq{SELECT outbox.complete_many(ARRAY['${d}4'::uuid], 'w')}, '0' ],
	[ qq{SELECT outbox.retry_dead('${d}4')}, 'f' ],
	[ q{SELECT outbox.retry_dead_topic('h_pull')}, '0' ],
	[ q{SELECT outbox.purge('1 hour')}, '0' ],
	[ qq{SELECT outbox.envelope_by_id('${d}1') -> 'payload'}, '{"h": 1}' ],
	[ qq{SELECT outbox.envelope_by_id('${d}3') IS NULL}, 't' ],
	[ q{SELECT count(*) IS NOT NULL FROM outbox.worker_status()}, 't' ],
	[ q{SELECT count(*) IS NOT NULL FROM outbox.topic_stats}, 't' ],
	[ q{SELECT outbox.unroute('h_remote')}, 't' ],);
my @h_out = split /\n/, safe_as('sp_user', 'hij', join(";\n", map { $_->[0] } @h) . ";\n"), -1;
is(join("\n", map { "$h[$_][0] -> " . ($h_out[$_] // 'missing') } 0 .. $#h),
	join("\n", map { "$_->[0] -> $_->[1]" } @h),
	'an ordinary role with public first on its search_path: every function does its work');
ok(wait_for($node, 'hij', q{SELECT count(*) FROM outbox.message WHERE topic = 'h' AND delivered_at IS NOT NULL}, '2', 30),
	'the worker, with public first on its search_path, delivers the NOTIFY route');
$node->safe_psql('hij', q{
	SET search_path = public, pg_catalog;
	SELECT outbox.route_remote('h_remote', 'inbox', 'INSERT INTO public.received (topic, env) VALUES ($2, $1)');
	SELECT outbox.append('h_remote', 'evt.h.v1', '{"h": 5}');
	SELECT outbox.drain_once('h_remote');
});
ok(wait_for($remote, 'inbox', q{SELECT string_agg(env->>'payload', ',' ORDER BY env->>'payload') FROM received WHERE topic = 'h_remote'},
		'{"h": 3},{"h": 5}', 30),
	'the remote route delivered each message once, with its envelope');
$node->safe_psql('hij', q{SET search_path = public, pg_catalog; SELECT outbox.unroute('h_remote'); SELECT outbox.purge('0')});
is($node->safe_psql('hij', qq{SET search_path = pg_catalog; SELECT id, attempts, lease_owner, delivered_at IS NOT NULL,
		last_error, available_at > now() FROM outbox.message WHERE topic = 'h_pull'}),
	"${d}4|1|w|f|once|t", 'the pulled message is as the calls left it (backing off after its failure), and purge kept it');
is($node->safe_psql('hij', 'SELECT who, what FROM public.hijack_log'), '',
	'no hostile object was ever used: not by CREATE EXTENSION, ALTER EXTENSION, the functions or the worker');
is($node->safe_psql('hij', q{SELECT count(*) FROM public.routes WHERE channel = 'hijacked'}), '1',
	'the decoy routes were left alone');

$node->stop;
$remote->stop;
done_testing();
