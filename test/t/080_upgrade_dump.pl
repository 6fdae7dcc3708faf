# Upgrades and backups: every installable version updates to the current one
# with its data and behaviour intact, and pg_dump + restore into a fresh
# cluster keeps messages, markers, routes and grants, after which the
# restored outbox keeps working.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('old');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$node->start;

my $current = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'krizaka_outbox'});
my @versions = split /\n/, $node->safe_psql('postgres',
	q{SELECT version FROM pg_available_extension_versions WHERE name = 'krizaka_outbox' ORDER BY string_to_array(version, '.')::int[]});
ok(scalar(@versions) >= 1, "installable versions: @versions; current $current");

# A database in every state the outbox knows, made with version $v.
sub populate
{
	my ($db, $v) = @_;
	# append got its ordering_key in 1.2
	my $append_args = 'text, text, jsonb, uuid, timestamptz' . ($v =~ /^1\.[01]$/ ? '' : ', text');
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION krizaka_outbox VERSION '$v';
		CREATE ROLE ${db}_writer;
		GRANT USAGE ON SCHEMA outbox TO ${db}_writer;
		GRANT EXECUTE ON FUNCTION outbox.append($append_args) TO ${db}_writer;
		SELECT outbox.route_notify('live', 'live_events');
		SELECT outbox.append('live', 'evt.a.v1', jsonb_build_object('n', g),
			('01890a5d-ac96-774b-bcce-b30209900' || lpad(g::text, 3, '0'))::uuid)
		  FROM generate_series(1, 6) g;
		-- 1: delivered, 2: leased, 3: backing off, 4: dead, 5: delayed, 6: due
		SELECT count(*) FROM outbox.claim('w', 'live', 4);
		SELECT outbox.complete('01890a5d-ac96-774b-bcce-b30209900001', 'w');
		SELECT outbox.fail('01890a5d-ac96-774b-bcce-b30209900003', 'w', 'boom');
		SET outbox.max_attempts = 1;
		SELECT outbox.fail('01890a5d-ac96-774b-bcce-b30209900004', 'w', 'fatal');
		UPDATE outbox.message SET available_at = now() + interval '1 day'
		 WHERE id = '01890a5d-ac96-774b-bcce-b30209900005';
		SELECT outbox.consume_once('billing', '01890a5d-ac96-774b-bcce-b30209900001');
	});
}

# What a database holds, independent of ids being generated or times.
my $fingerprint_sql = q{
	SELECT string_agg(format('%s %s %s %s %s %s %s', right(id::text, 3), topic, payload,
		attempts, delivered_at IS NOT NULL, dead_at IS NOT NULL, coalesce(last_error, '-')), ', ' ORDER BY id)
	  FROM outbox.message
	UNION ALL SELECT string_agg(consumer || ' ' || right(message_id::text, 3), ', ') FROM outbox.processed
	UNION ALL SELECT string_agg(topic || ' ' || target || ' ' || coalesce(channel, server), ', ') FROM outbox.routes
};

# The definition of everything in schema outbox, grants left out: an updated
# installation must be the same as a fresh one, column order included.
my $schema_sql = q{
	SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	  SELECT 'function ' || p.oid::regprocedure || ' returns ' || pg_get_function_result(p.oid)
	         || concat_ws(' ', '', p.prokind, p.prosecdef, p.provolatile, p.proisstrict, p.proparallel,
	                      array_to_string(p.proconfig, ','), p.prosrc, pg_get_function_arguments(p.oid),
	                      obj_description(p.oid, 'pg_proc'))
	    FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace
	  UNION ALL
	  SELECT 'relation ' || c.relname || concat_ws(' ', '', c.relkind,
	                                               (SELECT string_agg(o, ',' ORDER BY o) FROM unnest(c.reloptions) o),
	                                               obj_description(c.oid, 'pg_class'))
	    FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace
	  UNION ALL
	  SELECT 'column ' || c.relname || '.' || a.attnum || ' ' || a.attname
	         || concat_ws(' ', '', format_type(a.atttypid, a.atttypmod), a.attnotnull,
	                      pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum))
	    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	   WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'v') AND a.attnum > 0 AND NOT a.attisdropped
	  UNION ALL
	  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'outbox'::regnamespace
	  UNION ALL
	  SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid)
	    FROM pg_constraint WHERE connamespace = 'outbox'::regnamespace
	  UNION ALL
	  SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid)
	    FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'v'
	  UNION ALL
	  SELECT 'type ' || t.typname || ' ' || t.typtype::text
	    FROM pg_type t WHERE t.typnamespace = 'outbox'::regnamespace AND t.typrelid = 0 AND t.typelem = 0
	  UNION ALL
	  SELECT 'config ' || c.relname || ' ' || coalesce(e.extcondition[array_position(e.extconfig, c.oid)], '')
	    FROM pg_extension e, unnest(e.extconfig) AS x(oid) JOIN pg_class c ON c.oid = x.oid
	   WHERE e.extname = 'krizaka_outbox'
	) s(x)
};
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION krizaka_outbox');
my $fresh_schema = $node->safe_psql('fresh', $schema_sql);

for my $v (@versions)
{
	my $db = 'v' . ($v =~ s/\W/_/gr);
	populate($db, $v);
	# a route whose creator is gone before the update
	$node->safe_psql($db, qq{
		CREATE ROLE ${db}_gone;
		INSERT INTO outbox.routes (topic, target, channel, created_by)
		VALUES ('gone', 'notify', 'gone_events', '${db}_gone');
		DROP ROLE ${db}_gone;
	}) if $v ne $current;
	my $before = $node->safe_psql($db, $fingerprint_sql);
	$node->safe_psql($db, 'ALTER EXTENSION krizaka_outbox UPDATE');
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'krizaka_outbox'}),
		$current, "$v: updated to $current");
	is($node->safe_psql($db, $fingerprint_sql), $before, "$v: the data is intact");
	is($node->safe_psql($db, $schema_sql), $fresh_schema, "$v: the same definitions as a fresh installation");
	is($node->safe_psql($db, q{
		SELECT string_agg(topic || ' ' || CASE
		         WHEN created_by_role::oid = 0 THEN 'gone'
		         WHEN created_by_role::oid = (SELECT oid FROM pg_roles WHERE rolname = created_by) THEN 'its role'
		         ELSE coalesce(created_by_role::text, 'null') END, ', ' ORDER BY topic)
		  FROM outbox.routes}),
		# before 1.2 the update finds the creator gone; a row written into
		# the table of 1.2 without created_by_role is delivered by the role
		# of its created_by (none here): it stays NULL
		$v eq $current ? 'live its role' : $v =~ /^1\.[01]$/ ? 'gone gone, live its role' : 'gone null, live its role',
		"$v: the route's creator is the role of its created_by, or known gone");
	is($node->safe_psql($db, q{
		SELECT count(*) FROM pg_proc p
		 WHERE p.pronamespace = 'outbox'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')}),
		'0', "$v: no function executable by PUBLIC");
	is($node->safe_psql($db, q{
		SELECT string_agg(right(id::text, 3), ' ' ORDER BY id) FROM outbox.claim('w2', 'live')}),
		'006', "$v: claim takes exactly the due message");
	is($node->safe_psql($db, "SET ROLE ${db}_writer; SELECT outbox.append('live', 'evt.b.v1', '{}') IS NOT NULL"),
		't', "$v: the grants made before the update still work");
	is($node->safe_psql($db, q{SELECT outbox.retry_dead('01890a5d-ac96-774b-bcce-b30209900004')}),
		't', "$v: the dead message can be revived");
	is($node->safe_psql($db, q{SELECT outbox.drain_once('live')}), '2', "$v: drain_once delivers the revived and the new message");
}

# pg_dump of a database with the extension, then restore into a new cluster.
populate('src', $current);
$node->safe_psql('src', q{
	CREATE EXTENSION dblink;
	CREATE SERVER inbox FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host 'localhost', dbname 'inbox');
	CREATE USER MAPPING FOR CURRENT_USER SERVER inbox OPTIONS (user 'someone', password 'secret');
	SELECT outbox.route_remote('credits', 'inbox', 'INSERT INTO t VALUES ($1)');
	SELECT outbox.route_http('hooks', 'https://hooks.example.com/in',
		'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', '{"Authorization": "Bearer t0ken"}');
});
my $http_sql = q{
	SELECT r.url || ' ' || r.secret_fingerprint || ' ' || s.secret || ' ' || s.headers::text
	  FROM outbox.routes r JOIN outbox.route_secrets s USING (topic)
};
my $http_before = $node->safe_psql('src', $http_sql);
like($http_before, qr{^https://hooks\.example\.com/in [0-9a-f]{16} whsec_MfKQ}, 'the HTTP route, its secret and its headers');
my $before = $node->safe_psql('src', $fingerprint_sql);
my $dump = $node->basedir . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ], 'pg_dump');

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$new->start;
$new->safe_psql('postgres', 'CREATE ROLE src_writer; CREATE DATABASE src');
$new->command_ok([ 'pg_restore', '--exit-on-error', '-d', $new->connstr('src'), $dump ], 'pg_restore into a fresh cluster');

is($new->safe_psql('src', $fingerprint_sql), $before, 'messages, markers and routes are restored');
is($new->safe_psql('src', q{
	SELECT string_agg(topic || ' ' || (created_by_role::oid = (SELECT oid FROM pg_roles WHERE rolname = created_by))::text, ', ' ORDER BY topic)
	  FROM outbox.routes}),
	'credits true, hooks true, live true', "the routes' creators are restored as the roles of that name");
is($new->safe_psql('src', $http_sql), $http_before, "the HTTP route's secret and headers are restored");
is($new->safe_psql('src', q{SELECT count(*) FROM outbox.message WHERE leased_until IS NOT NULL}),
	'1', 'the lease in flight is restored too');
is($new->safe_psql('src', q{
	SELECT count(*) FROM pg_proc p
	 WHERE p.pronamespace = 'outbox'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')}),
	'0', 'no function executable by PUBLIC after restore');
is($new->safe_psql('src', q{SET ROLE src_writer; SELECT outbox.append('live', 'evt.c.v1', '{"after": "restore"}') IS NOT NULL}),
	't', 'the grants are restored');
is($new->safe_psql('src', q{
	SELECT string_agg(right(id::text, 3), ' ' ORDER BY id) FROM outbox.claim('w2', 'live', 1)}),
	'006', 'claim works on the restored table');
is($new->safe_psql('src', q{SELECT outbox.consume_once('billing', '01890a5d-ac96-774b-bcce-b30209900001')}),
	'f', 'the consume_once markers still protect');
is($new->safe_psql('src', q{SELECT outbox.drain_once('live')}), '1', 'drain_once delivers on the restored outbox');
is($new->safe_psql('src', q{SELECT count(*) FROM outbox.message WHERE payload @> '{"after": "restore"}' AND delivered_at IS NOT NULL}),
	'1', 'including a message appended after the restore');

$new->stop;
$node->stop;
done_testing();
