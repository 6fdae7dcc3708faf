# A session holds a lock on outbox.message_seq that appends and claims
# need (ALTER SEQUENCE in an open transaction), and claims itself: the
# appenders and the other claimers wait on that lock as on any other
# (visible in pg_stat_activity as a Lock wait, seen by the deadlock
# detector), each can be cancelled within a second, the holder's own claim
# goes through, and once the lock is released everything proceeds.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('seqlock', '', "deadlock_timeout = 100ms\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');
$node->safe_psql('app', q{SELECT outbox.append('t', 'evt.a.v1', '{"n": 1}')});
$node->safe_psql('app', q{SELECT outbox.append('u', 'evt.a.v1', '{"n": 1}')});

# A psql running $sql in the background as application_name $name
sub start_session
{
	my ($name, $sql) = @_;
	my %s = (name => $name, out => '', err => '');
	my $connstr = $node->connstr('app') . " application_name=$name";
	$s{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $connstr, '-c', $sql ],
		'<', \'', '>', \$s{out}, '2>', \$s{err},
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return \%s;
}

# The wait event type of session $name once it waits, '' if it never does
sub wait_type
{
	my ($name) = @_;
	my $sql = qq{SELECT coalesce(wait_event_type, '') FROM pg_stat_activity
				  WHERE application_name = '$name' AND state = 'active'
				    AND wait_event_type IN ('Lock', 'LWLock')};
	my $until = time() + 10;
	while (time() < $until)
	{
		my $t = $node->safe_psql('app', $sql);
		return $t if $t ne '';
		usleep(20_000);
	}
	return '';
}

# Cancel session $s; returns the seconds until its psql ended
sub cancel
{
	my ($s) = @_;
	my $start = time();
	$node->safe_psql('app',
		"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '$s->{name}'");
	while ($s->{h}->pumpable && time() - $start < 30)
	{
		$s->{h}->pump_nb;
		usleep(10_000);
	}
	my $took = time() - $start;
	$s->{h}->finish;
	return $took;
}

my $holder = $node->background_psql('app');
$holder->query_safe('BEGIN');
$holder->query_safe('ALTER SEQUENCE outbox.message_seq CACHE 1');

my $appender = start_session('appender', q{SELECT outbox.append('t', 'evt.a.v1', '{"n": 2}')});
is(wait_type('appender'), 'Lock', 'the appender waits for the sequence lock as for any lock');
my $claimer = start_session('claimer', q{SELECT count(*) FROM outbox.claim('w', 'u', 10, 30)});
is(wait_type('claimer'), 'Lock', 'a claimer waits for the sequence lock as for any lock');

# the holder claims in its own transaction while the others wait
my $start = time();
is($holder->query_safe(q{SELECT count(*) FROM outbox.claim('w', 't', 10, 30)}),
	'1', "the lock holder's own claim finds the committed message");
cmp_ok(time() - $start, '<', 5, 'and does not wait for the appender it blocks');

my $took = cancel($appender);
cmp_ok($took, '<', 1, sprintf('the appender is cancelled in %.2f s', $took));
like($appender->{err}, qr/57014: canceling statement due to user request/,
	'the appender ends with 57014');
$took = cancel($claimer);
cmp_ok($took, '<', 1, sprintf('the claimer is cancelled in %.2f s', $took));
like($claimer->{err}, qr/57014: canceling statement due to user request/,
	'the claimer ends with 57014');

# waiting again, then the holder commits: both go through
$appender = start_session('appender', q{SELECT outbox.append('t', 'evt.a.v1', '{"n": 3}') IS NOT NULL});
is(wait_type('appender'), 'Lock', 'a new appender waits');
$claimer = start_session('claimer', q{SELECT count(*) FROM outbox.claim('w', 'u', 10, 30)});
is(wait_type('claimer'), 'Lock', 'a new claimer waits');
$holder->query_safe('COMMIT');
$holder->quit;
$appender->{h}->finish;
$claimer->{h}->finish;
chomp($appender->{out}, $claimer->{out});
is($appender->{out}, 't', 'after the release the append goes through');
is($claimer->{out}, '1', 'after the release the claim goes through');

# and nothing was skipped or lost: the released append is claimable
is($node->safe_psql('app', q{
	SELECT string_agg(payload->>'n', ' ' ORDER BY seq) FROM outbox.claim('w2', 't', 10, 30)}),
	'3', 'the message appended after the release is claimed; the cancelled one is not there');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message}), '3',
	'three messages stored: the two first and the one after the release');

$node->stop;
done_testing();
