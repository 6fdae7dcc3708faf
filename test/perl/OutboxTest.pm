# OutboxTest: helpers shared by the Perl TAP tests of krizaka_outbox.
#
# The tests load it with
#     use FindBin;
#     use lib "$FindBin::RealBin/../perl";
#     use OutboxTest;
# Every helper takes the node it talks to; none keeps state of its own.
package OutboxTest;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(lit wait_for wait_status worker_pid worker_node scram_node remote_server
  replicated_outbox notified_ids message_index_reads pgbench_start retried_backlog held_snapshot);

# Quote a string as an SQL literal.
sub lit
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# Poll $sql in $db on $node until it returns $expected or $seconds pass;
# an error counts as a different answer.  Says the last answer when it
# gives up.
sub wait_for
{
	my ($node, $db, $sql, $expected, $seconds) = @_;
	my $until = time() + $seconds;
	my ($rc, $out, $err) = (0, '', '');
	while (time() < $until)
	{
		($rc, $out, $err) = $node->psql($db, $sql);
		return 1 if $rc == 0 && $out eq $expected;
		usleep(50_000);
	}
	diag("last answer to \"$sql\": " . ($rc == 0 ? $out : "error: $err"));
	return 0;
}

# Assert that worker_status() (read in database postgres) comes to show
# exactly these rows, "datname|state" joined by commas in datname order;
# returns the seconds it took.
sub wait_status
{
	my ($node, $expected, $what) = @_;
	my $start = time;
	ok( $node->poll_query_until(
			'postgres',
			"SELECT coalesce(string_agg(datname || '|' || state, ',' ORDER BY datname), '') FROM outbox.worker_status()",
			$expected),
		$what);
	return time - $start;
}

# The pid of the drain worker of database $db, as worker_status() shows it.
sub worker_pid
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM outbox.worker_status() WHERE datname = '$db'");
}

# A started cluster with the library preloaded and drain workers for the
# databases listed in $databases (made by the caller), with a long naptime
# so that only wake-ups and due times make them run; $conf is added to
# postgresql.conf; %init goes to init (allows_streaming => 1, ...).
sub worker_node
{
	my ($name, $databases, $conf, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = '$databases'
outbox.worker_naptime_ms = 60000
} . ($conf // ''));
	$node->start;
	return $node;
}

# A started cluster where the bootstrap superuser is trusted and every other
# role logs in with a SCRAM password: a remote server that asks for one.
sub scram_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', "password_encryption = 'scram-sha-256'");
	$node->start;
	my $su = $node->safe_psql('postgres', 'SELECT current_user');
	open my $hba, '>', $node->data_dir . '/pg_hba.conf' or die $!;
	print $hba "local all $su trust\nlocal all all scram-sha-256\n";
	close $hba;
	$node->reload;
	return $node;
}

# In database $db of $node, the extension and a dblink_fdw server $server
# for database $target of the same cluster (or of cluster $target_node),
# with a user mapping for the current (bootstrap) user.
sub remote_server
{
	my ($node, $db, $server, $target, $target_node) = @_;
	$target_node //= $node;
	my ($host, $port) = ($target_node->host, $target_node->port);
	my $su = $node->safe_psql($db, 'SELECT current_user');
	$node->safe_psql($db, qq{
		CREATE EXTENSION krizaka_outbox;
		CREATE EXTENSION dblink;
		CREATE SERVER $server FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname '$target');
		CREATE USER MAPPING FOR $su SERVER $server OPTIONS (user '$su');
	});
	return;
}

# A primary with a drain worker for database app and a streaming standby of
# it (asynchronous until the caller says otherwise), and a remote target,
# a cluster of its own with a table public.received (id, topic, at).  In
# app: topic n is routed to NOTIFY channel events, topic r to an INSERT
# into the target's table.  The extension is in database postgres too, for
# worker_status().  Returns ($primary, $standby, $target), all started;
# $conf is added to the primary's postgresql.conf (and so the standby's).
sub replicated_outbox
{
	my ($conf) = @_;
	my $target = PostgreSQL::Test::Cluster->new('target');
	$target->init;
	$target->start;
	$target->safe_psql('postgres',
		'CREATE TABLE received (id uuid, topic text, at timestamptz DEFAULT clock_timestamp())');

	my $primary = worker_node('primary', 'app', $conf, allows_streaming => 1);
	$primary->backup('base');
	my $standby = PostgreSQL::Test::Cluster->new('standby');
	$standby->init_from_backup($primary, 'base', has_streaming => 1);
	$standby->start;

	$primary->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');
	$primary->safe_psql('postgres', 'CREATE DATABASE app');
	remote_server($primary, 'app', 'target', 'postgres', $target);
	$primary->safe_psql('app', qq{
		SELECT outbox.route_notify('n', 'events');
		SELECT outbox.route_remote('r', 'target',
			'INSERT INTO public.received (id, topic) VALUES ((\$1->>''id'')::uuid, \$2)');
	});
	return ($primary, $standby, $target);
}

# The ids of the envelopes that listener $listener (a background_psql) has
# been sent so far, in order; $heard (a scalar reference) keeps its output
# between calls.  With $count, waits (up to the default timeout) until
# there are that many.
sub notified_ids
{
	my ($listener, $heard, $count) = @_;
	my $until = time() + $PostgreSQL::Test::Utils::timeout_default;
	my @ids;
	for (;;)
	{
		$$heard .= $listener->query_safe('SELECT 1');
		@ids = ($$heard =~ /with payload "\{"id": "([0-9a-f-]+)"/g);
		last if !defined $count || @ids >= $count || time() >= $until;
		usleep(50_000);
	}
	return @ids;
}

# Index entries read from the indexes of outbox.message of database $db
# so far (the statistics of this session flushed first).
sub message_index_reads
{
	my ($node, $db) = @_;
	return $node->safe_psql($db, q{
		SELECT pg_stat_force_next_flush();
		SELECT sum(idx_tup_read) FROM pg_stat_user_indexes
		 WHERE schemaname = 'outbox' AND relname = 'message'});
}

# A backlog of $total messages of topic $topic in database $db of $node,
# each claimed and failed once, its backoff moved an hour back instead of
# waited for: all due again, deferred; with $sub, in the named
# subscription $sub, made first.
sub retried_backlog
{
	my ($node, $db, $topic, $total, $sub) = @_;
	my $rounds = int(($total + 499) / 500);
	my $arg = defined $sub ? ", '$sub'" : '';
	my $moved = defined $sub
	  ? q{UPDATE outbox.subscription_state SET available_at = available_at - interval '1 hour'
		 WHERE sub_id = (SELECT sub_id FROM outbox.subscription WHERE name = '} . $sub . q{')}
	  : qq{UPDATE outbox.message SET available_at = available_at - interval '1 hour'
		 WHERE topic = '$topic'};
	$node->safe_psql($db, "SELECT outbox.subscribe('$topic', '$sub')") if defined $sub;
	$node->safe_psql($db, qq{
		SELECT outbox.append_batch('$topic', 'evt.$topic.v1',
			(SELECT array_agg(pg_catalog.jsonb_build_object('n', g) ORDER BY g)
			   FROM generate_series(1, $total) g));
		DO \$\$BEGIN
			FOR i IN 1 .. $rounds LOOP
				PERFORM outbox.fail(c.id, 'setup', 'target unavailable'$arg)
				   FROM outbox.claim('setup', '$topic', 500, 600$arg) c;
			END LOOP;
		END\$\$;
		$moved;
		VACUUM ANALYZE outbox.message;
	});
	my $due = defined $sub
	  ? qq{SELECT count(*) FROM outbox.subscription_state x JOIN outbox.subscription s USING (sub_id)
		 WHERE s.name = '$sub' AND x.attempts = 1 AND x.leased_until IS NULL
		   AND x.available_at <= now()}
	  : qq{SELECT count(*) FROM outbox.message
		 WHERE topic = '$topic' AND deferred AND attempts = 1 AND available_at <= now()};
	is($node->safe_psql($db, $due), $total,
		"$total retried messages of topic $topic are due" . (defined $sub ? " in $sub" : ''));
	return;
}

# A session of database $db that holds a snapshot (a REPEATABLE READ
# transaction that read outbox.message) until it quits
sub held_snapshot
{
	my ($node, $db) = @_;
	my $held = $node->background_psql($db);
	$held->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$held->query_safe('SELECT count(*) FROM outbox.message');
	return $held;
}

# pgbench (-n and these options) started in the background against
# database $db of $node; returns a sub that waits for it and says whether
# it ran without error (printing its errors when not).
sub pgbench_start
{
	my ($node, $db, @options) = @_;
	my ($out, $err);
	my $h = IPC::Run::start([ 'pgbench', '-n', @options, $node->connstr($db) ],
		'>', \$out, '2>', \$err);
	return sub { my $ok = $h->finish; diag($err) unless $ok; return $ok; };
}

1;
