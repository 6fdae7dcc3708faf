# Moving to a newer PostgreSQL major with the outbox in place, the two ways
# users do it: a dump taken from the old major restores into the new one,
# and pg_upgrade moves the whole cluster.  Either way the messages, their
# states, the consumers' markers, the routes and the named subscriptions
# with what they have in flight arrive intact, and the outbox keeps working
# on the new major.
#
# Runs on the new major; the old one is the installation whose bin
# directory is KRIZAKA_OLD_PGBIN, with the extension installed there too
# (test/run sets it when testing a major other than 15).
use strict;
use warnings;
use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'no older major to move from (KRIZAKA_OLD_PGBIN is not set)'
  unless $ENV{KRIZAKA_OLD_PGBIN};

my $old = PostgreSQL::Test::Cluster->new('old',
	install_path => dirname($ENV{KRIZAKA_OLD_PGBIN}));
$old->init(extra => [ '--locale=C', '--encoding=UTF8' ]);
$old->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$old->start;
my ($old_major) = $old->safe_psql('postgres', 'SHOW server_version_num') =~ /^(\d+)\d{4}$/;

$old->safe_psql('postgres', 'CREATE DATABASE app');
$old->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.route_notify('live', 'live_events');
	SELECT outbox.append('live', 'evt.a.v1', jsonb_build_object('n', g),
		('01890a5d-ac96-774b-bcce-b30209900' || lpad(g::text, 3, '0'))::uuid)
	  FROM generate_series(1, 4) g;
	-- 1: delivered, 2: backing off, 3: leased, 4: due
	SELECT count(*) FROM outbox.claim('w', 'live', 3);
	SELECT outbox.complete('01890a5d-ac96-774b-bcce-b30209900001', 'w');
	SELECT outbox.fail('01890a5d-ac96-774b-bcce-b30209900002', 'w', 'boom');
	SELECT outbox.consume_once('billing', '01890a5d-ac96-774b-bcce-b30209900001');
});

# What the database holds, independent of times.
my $fingerprint_sql = q{
	SELECT string_agg(format('%s %s %s %s %s', right(id::text, 3), payload, attempts,
		delivered_at IS NOT NULL, coalesce(last_error, '-')), ', ' ORDER BY id)
	  FROM outbox.message
	UNION ALL SELECT string_agg(consumer || ' ' || right(message_id::text, 3), ', ') FROM outbox.processed
	UNION ALL SELECT string_agg(topic || ' ' || target || ' ' || channel, ', ') FROM outbox.routes
};
my $before = $old->safe_psql('app', $fingerprint_sql);
like($before, qr/^001 \{"n": 1\} 1 t -, 002 \{"n": 2\} 1 f boom, 003/, "the data on $old_major");

# A named subscription that reads the topic from its start, with two
# messages leased and one of them failed, and its state rows.
is($old->safe_psql('app', q{SELECT outbox.subscribe('live', 'audit', '-infinity')}), 't',
	"a named subscription on $old_major");
my @audit = split /\n/, $old->safe_psql('app', q{
	SELECT id FROM outbox.claim('a1', 'live', 2, 3600, 'audit') ORDER BY seq});
is(scalar(@audit), 2, 'the subscription leases two messages');
is($old->safe_psql('app', qq{SELECT outbox.fail('$audit[0]', 'a1', 'audit boom', 'audit')}), 't',
	'and fails one of them');
# Every row of the subscriptions' tables, whatever their columns.
sub subscriptions_of
{
	my ($cluster) = @_;
	my @tables = split /\n/, $cluster->safe_psql('app', q{
		SELECT c.relname FROM pg_class c
		 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'subscription%'
		 ORDER BY 1});
	return join("\n", map {
		"$_: " . $cluster->safe_psql('app', qq{
			SET TimeZone = 'UTC';
			SELECT coalesce(string_agg(r, ' | ' ORDER BY r), '') FROM (SELECT to_jsonb(t)::text AS r FROM outbox.$_ t) x})
	} @tables);
}
my $subs_before = subscriptions_of($old);
like($subs_before, qr/^(?=.*"name": "audit")(?=.*"lease_owner": "a1")(?=.*"audit boom")/s,
	"the subscription's rows on $old_major");

# The outbox works on the new major: a new message is appended after the
# others, and the due ones are claimed.
sub works
{
	my ($node, $what) = @_;
	is( $node->safe_psql('app', q{
			SELECT outbox.append('live', 'evt.a.v1', '{"n": 5}') IS NOT NULL;
			SELECT string_agg(payload::text, ', ' ORDER BY seq) FROM outbox.claim('w2', 'live', 10);
		}),
		"t\n{\"n\": 4}, {\"n\": 5}",
		"$what: appends and claims on the new major");
	# the named subscription: the lease taken on the old major completes,
	# and the message appended here is read
	is( $node->safe_psql('app', qq{
			SELECT outbox.complete('$audit[1]', 'a1', 'audit');
			SELECT count(*) FILTER (WHERE payload = '{"n": 5}') FROM outbox.claim('a2', 'live', 100, NULL, 'audit');
		}),
		"t\n1", "$what: the named subscription goes on on the new major");
	is($node->safe_psql('app',
			q{SELECT extversion = default_version FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname WHERE extname = 'krizaka_outbox'}),
		't', "$what: the extension is at its current version");
}

# 1. pg_dump of the new major (as the PostgreSQL documentation advises)
# from the old server, restored into a new cluster.
my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init(extra => [ '--locale=C', '--encoding=UTF8' ]);
$restored->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$restored->start;
my ($major) = $restored->safe_psql('postgres', 'SHOW server_version_num') =~ /^(\d+)\d{4}$/;
my $dump = $PostgreSQL::Test::Utils::tmp_check . '/app.dump';
command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $old->connstr('app') ],
	"pg_dump $major dumps the outbox from $old_major");
$restored->safe_psql('postgres', 'CREATE DATABASE app');
command_ok([ 'pg_restore', '--exit-on-error', '-d', $restored->connstr('app'), $dump ],
	"the dump restores into $major");
is($restored->safe_psql('app', $fingerprint_sql), $before, 'the restored data is the dumped data');
is(subscriptions_of($restored), $subs_before, 'the restored subscription is the dumped one');
works($restored, 'restored');
$restored->stop;

# 2. pg_upgrade from the old cluster to a new one (checksums off, as initdb
# of the old major made it).
#
# Debian 12's 15.20 stamps every column of every table with an attribute
# option, pg_attver, that PostgreSQL itself does not have: pg_upgrade to a
# server built from PostgreSQL's source carries it over and the new server
# refuses it ("unrecognized parameter"), for any table, with or without the
# extension.  On such an old server the stamps are removed first, as a user
# of that build would have to.
for my $db ('postgres', 'app')
{
	my $stamped = $old->safe_psql($db, q{
		WITH u AS (
			UPDATE pg_catalog.pg_attribute
			   SET attoptions = NULLIF(ARRAY(SELECT o FROM unnest(attoptions) o
			                                  WHERE o NOT LIKE 'pg_attver=%'), '{}')
			 WHERE attrelid >= 16384
			   AND EXISTS (SELECT FROM unnest(attoptions) o WHERE o LIKE 'pg_attver=%')
			RETURNING 1)
		SELECT count(*) FROM u});
	note("$db: pg_attver removed from $stamped columns") if $stamped;
}
$old->stop;
my $upgraded = PostgreSQL::Test::Cluster->new('upgraded');
$upgraded->init(no_data_checksums => 1, extra => [ '--locale=C', '--encoding=UTF8' ]);
$upgraded->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
{
	# pg_upgrade writes its logs into the new data directory, from its cwd
	my $cwd = $PostgreSQL::Test::Utils::tmp_check;
	chdir $cwd;
	command_ok(
		[
			'pg_upgrade', '--no-sync', '--copy',
			'-d', $old->data_dir, '-D', $upgraded->data_dir,
			'-b', $old->config_data('--bindir'), '-B', $upgraded->config_data('--bindir'),
			'-s', $upgraded->host, '-p', $old->port, '-P', $upgraded->port,
		],
		"pg_upgrade moves the cluster from $old_major to $major");
}
$upgraded->start;
is($upgraded->safe_psql('app', $fingerprint_sql), $before, 'the upgraded data is the old data');
is(subscriptions_of($upgraded), $subs_before, 'the upgraded subscription is the old one');
works($upgraded, 'upgraded');
$upgraded->stop;

done_testing();
