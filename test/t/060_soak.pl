# Soak with faults: producers append in transactions of which a share roll
# back, pull workers claim / extend / complete / fail (and sometimes walk away
# after delivering), and the background worker delivers a second topic
# through a remote route; every delivery goes through one consumer function
# that applies an effect with consume_once and fails on purpose now and
# then.  Meanwhile pull-worker, producer and background-worker backends are
# killed with SIGKILL and the cluster is shut down immediately and restarted.
# Then everything drains, and the invariants are checked exactly:
#
#   - the messages in the outbox are exactly the committed appends, and each
#     of them was delivered at least once and ends delivered, without lease;
#   - no id of a rolled-back transaction was ever stored or delivered;
#   - each committed append has exactly one effect and one consume_once
#     marker, and nothing else has any;
#   - no delivery started while a message was dead, and no life of a message
#     (from its append or revival to its death or delivery) had more
#     deliveries than outbox.max_attempts;
#   - no owner was refused complete, complete_many, fail or extend on a lease
#     it held;
#   - the server log shows one crash per SIGKILL sent and no other, and one
#     immediate shutdown per restart.
#
# The load lasts KRIZAKA_SOAK_SECONDS seconds (default 100), with a fault
# every 12 seconds or so (at least seven: pull worker, background worker,
# immediate restart, producer, pull worker, background worker, immediate
# restart, then round again).  KRIZAKA_SOAK_SEED repeats which backends are
# killed; the load itself varies from run to run.
use strict;
use warnings;
use File::Basename qw(dirname);
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $load_seconds = $ENV{KRIZAKA_SOAK_SECONDS} || 100;
die "KRIZAKA_SOAK_SECONDS must be a number of seconds, at least 60\n"
  unless $load_seconds =~ /^\d+$/ && $load_seconds >= 60;
my $seed = $ENV{KRIZAKA_SOAK_SEED} // (time() * 1000 ^ $$) % 1_000_000;
srand($seed);
note "seed $seed, load for $load_seconds s";

my $max_attempts = 3;
my $nproducers   = 3;
my $npullers     = 2;

my $node = PostgreSQL::Test::Cluster->new('soak');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'krizaka_outbox'
restart_after_crash = on
max_connections = 60
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 1000
outbox.lease_seconds = 10
outbox.batch_size = 20
outbox.max_attempts = $max_attempts
outbox.backoff_seconds = 1
outbox.backoff_max_seconds = 2
log_statement = none
});
$node->start;

my $su = $node->safe_psql('postgres', 'SELECT current_user');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE consumer');

my $soak_dir      = dirname(__FILE__) . '/../soak';
my $consumer_conn = $node->connstr('consumer') . " user=$su";
$node->safe_psql(
	'consumer',
	slurp_file("$soak_dir/consumer.sql"),
	extra_params => [ '-v', "log_conn=$consumer_conn application_name=soak-log" ]);
$node->safe_psql(
	'app',
	slurp_file("$soak_dir/app.sql"),
	extra_params => [
		'-v', "consumer_conn=$consumer_conn application_name=soak-pull-consumer",
		'-v', 'consumer_host=' . $node->host,
		'-v', 'consumer_port=' . $node->port,
		'-v', "consumer_user=$su"
	]);
ok( $node->poll_query_until(
		'app',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}
	),
	'the background worker of app runs');

# Sessions: a psql running one CALL for as long as the test wants, restarted
# whenever it ends while it should run (a crash took its backend).
my $logdir = $PostgreSQL::Test::Utils::tmp_check . '/soak_sessions';
mkdir $logdir;
my %sessions;
for my $i (1 .. $nproducers)
{
	$sessions{"prod-$i"} = { kind => 'prod', call => sub { "CALL soak.produce('prod-$i')" } };
}
for my $i (1 .. $npullers)
{
	# each run of a pull worker has an owner name of its own, as a process would
	$sessions{"pull-$i"} =
	  { kind => 'pull', call => sub { "CALL soak.pull('pull-$i." . shift() . "')" } };
}
$_->{runs} = 0 for values %sessions;

# Start session $name: fork a psql that runs its CALL.
sub start_session
{
	my ($name) = @_;
	my $s = $sessions{$name};
	my $sql = $s->{call}->($s->{runs} + 1);
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		open STDOUT, '>>', "$logdir/$name.log" or POSIX::_exit(125);
		open STDERR, '>&', \*STDOUT or POSIX::_exit(125);
		exec('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('app') . " application_name=soak-$name", '-c', $sql)
		  or POSIX::_exit(126);
	}
	$s->{pid}     = $pid;
	$s->{started} = time();
	$s->{runs}++;
	return;
}

# Note which sessions ended.
sub reap_sessions
{
	for my $s (values %sessions)
	{
		next unless $s->{pid};
		next unless waitpid($s->{pid}, WNOHANG) == $s->{pid};
		$s->{pid} = undef;
		$s->{ended} = time();
	}
	return;
}

# Start again every session of these kinds that is not running, at most
# once a second each.
sub keep_sessions
{
	my (@kinds) = @_;
	reap_sessions();
	for my $name (sort keys %sessions)
	{
		my $s = $sessions{$name};
		next if $s->{pid} || !grep { $_ eq $s->{kind} } @kinds;
		next if $s->{ended} && time() - $s->{ended} < 1;
		start_session($name);
	}
	return;
}

# Wait until no session of these kinds runs.
sub wait_sessions_ended
{
	my ($seconds, @kinds) = @_;
	my $until = time() + $seconds;
	while (time() < $until)
	{
		reap_sessions();
		my @running = grep {
			my $kind = $_->{kind};
			$_->{pid} && grep { $_ eq $kind } @kinds
		} values %sessions;
		return 1 unless @running;
		usleep(100_000);
	}
	return 0;
}

# Run SQL, quietly; returns the output, or undef if it failed.
sub try_sql
{
	my ($db, $sql) = @_;
	my ($rc, $out) = $node->psql($db, $sql);
	return $rc == 0 ? $out : undef;
}

my $log_offset = -s $node->logfile;

# Wait until the server has come back from a crash it is going through.
sub wait_crash_recovered
{
	my ($from) = @_;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $from);
	$node->wait_for_log(qr/database system is ready to accept connections/, $from);
	$node->poll_query_until('postgres', 'SELECT 1', '1');
	return;
}

# The faults.
my %faults = (pull => 0, prod => 0, worker => 0, immediate => 0);

# SIGKILL one backend running a session of this kind, or the background
# worker; returns whether one was killed.
sub kill_backend
{
	my ($kind) = @_;
	my $query =
	  $kind eq 'worker'
	  ? q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}
	  : qq{SELECT pid FROM pg_stat_activity WHERE application_name ~ '^soak-$kind-[0-9]+\$'};
	my $until = time() + 30;
	while (time() < $until)
	{
		my $out = try_sql('postgres', $query) // '';
		my @pids = grep { /^\d+$/ } split /\n/, $out;
		if (@pids)
		{
			my $pid  = $pids[ int(rand(@pids)) ];
			my $from = -s $node->logfile;
			if (kill 'KILL', $pid)
			{
				$faults{$kind}++;
				note sprintf('%.1f s: SIGKILL %s backend %d', time() - $^T, $kind, $pid);
				wait_crash_recovered($from);
				return 1;
			}
		}
		usleep(200_000);
	}
	note "no $kind backend to kill";
	return 0;
}

# Shut the cluster down at once and start it again.
sub immediate_restart
{
	note sprintf('%.1f s: immediate shutdown and restart', time() - $^T);
	$node->stop('immediate');
	$faults{immediate}++;
	reap_sessions();
	$node->start;
	return;
}

# Revive the dead messages, one by one or a topic at a time.
my $revive_by_topic = 0;
my $revive_failures = 0;

sub revive
{
	my ($must) = @_;
	$revive_by_topic = !$revive_by_topic;
	my $sql = 'CALL soak.revive(' . ($revive_by_topic ? 'true' : 'false') . ')';
	if ($must)
	{
		$node->safe_psql('app', $sql);
		return;
	}
	my ($rc, $out, $err) = $node->psql('app', $sql);
	# a fault may cut it short; a refusal by retry_dead would be a defect
	if ($rc != 0 && $err =~ /retry_dead/)
	{
		$revive_failures++;
		diag "revive failed: $err";
	}
	return;
}

# 1. The load, with faults.
my @cycle = qw(pull worker immediate prod);
my $nfaults = int($load_seconds / 12);
$nfaults = 7 if $nfaults < 7;
my $t0 = time();
my @schedule =
  map { { at => $t0 + $load_seconds * $_ / ($nfaults + 1), kind => $cycle[ ($_ - 1) % @cycle ] } }
  1 .. $nfaults;
my $next_revive = $t0 + 5;
while (time() < $t0 + $load_seconds)
{
	keep_sessions('prod', 'pull');
	if (@schedule && time() >= $schedule[0]{at})
	{
		my $f = shift @schedule;
		if ($f->{kind} eq 'immediate')
		{
			immediate_restart();
		}
		else
		{
			kill_backend($f->{kind});
		}
	}
	if (time() >= $next_revive)
	{
		revive(0);
		$next_revive = time() + 4;
	}
	usleep(100_000);
}
is(scalar(@schedule), 0, 'every fault was due');
is($faults{pull} + $faults{prod} + $faults{worker} + $faults{immediate}, $nfaults, "all $nfaults faults were injected");
cmp_ok($faults{immediate}, '>=', 2, 'at least two immediate shutdowns');

# 2. Drain: the producers stop, failures stop, and the dead are revived
# until every message is delivered.
$node->safe_psql('app', 'UPDATE soak.control SET stop_producers = true');
ok(wait_sessions_ended(30, 'prod'), 'the producers stopped');
$node->safe_psql('app',      'UPDATE soak.control SET abandon_percent = 0');
$node->safe_psql('consumer', 'UPDATE soak.control SET fail_percent = 0');
my $drain_start = time();
my $drained     = 0;
while (time() < $drain_start + 120)
{
	keep_sessions('pull');
	revive(1);
	if ($node->safe_psql('app', 'SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL') eq '0')
	{
		$drained = 1;
		last;
	}
	sleep 2;
}
ok($drained, sprintf('everything was delivered %.0f s after the load ended', time() - $drain_start));
$node->safe_psql('app', 'UPDATE soak.control SET stop_pullers = true');
ok(wait_sessions_ended(60, 'pull'), 'the pull workers stopped');

# At most ten of a list, for diagnostics.
sub some
{
	my @list = grep { defined } @_;
	splice(@list, 10) if @list > 10;
	return join("\n", @list);
}

# 3. What happened, read back.
sub rows
{
	my ($db, $sql) = @_;
	return map { [ split /\|/, $_, -1 ] } grep { length } split /\n/, $node->safe_psql($db, $sql);
}
my $us = q{(extract(epoch FROM %s) * 1000000)::bigint};

my %produced    = map { $_->[0] => $_->[1] } rows('app', 'SELECT id, topic FROM soak.produced');
my %rolled_back = map { $_->[0] => 1 } rows('app', 'SELECT id FROM soak.rolled_back');
my $reappended  = $node->safe_psql('app', 'SELECT count(*) FROM soak.reappended');
my %message     = map { $_->[0] => $_ } rows('app',
	q{SELECT id, delivered_at IS NOT NULL, dead_at IS NOT NULL, leased_until IS NOT NULL FROM outbox.message});
my @revived = rows('app',
	sprintf(q{SELECT id, %s, %s, how FROM soak.revived ORDER BY revived_at}, sprintf($us, 'dead_at'), sprintf($us, 'revived_at')));
my %events = map { $_->[0] => $_->[1] } rows('app', 'SELECT what, count(*) FROM soak.worker_event GROUP BY what');
my @anomalies = grep { /^ANOMALY/ } keys %events;

my @attempts = rows('consumer',
	sprintf(q{SELECT message_id, via, what, %s FROM soak.attempt ORDER BY n}, sprintf($us, 'at')));
my @effects = map { $_->[0] } rows('consumer', 'SELECT message_id FROM soak.effect');
my %markers = map { $_->[0] => 1 } rows('consumer', q{SELECT message_id FROM outbox.processed WHERE consumer = 'soak'});

# 4. The invariants.
my $nproduced = keys %produced;
cmp_ok($nproduced, '>', 500, "a load worth the name: $nproduced committed appends");
cmp_ok(scalar(keys %rolled_back), '>', 50, 'with rolled-back appends among them');

my @not_stored  = grep { !$message{$_} } keys %produced;
my @unexpected  = grep { !exists $produced{$_} } keys %message;
is(scalar(@not_stored), 0, 'every committed append is in the outbox') or diag some(@not_stored);
is(scalar(@unexpected), 0, 'the outbox holds nothing that was not committed') or diag some(@unexpected);

my @undelivered = grep { $message{$_} && $message{$_}[1] ne 't' } keys %produced;
my @still_dead  = grep { $message{$_} && $message{$_}[2] eq 't' } keys %produced;
my @leased      = grep { $message{$_}[3] eq 't' } keys %message;
is(scalar(@undelivered), 0, 'every committed append ends delivered');
is(scalar(@still_dead),  0, 'none ends dead');
is(scalar(@leased),      0, 'no message is left leased');

my %delivered;
for my $a (@attempts)
{
	$delivered{ $a->[0] }++ if $a->[2] eq 'delivered';
}
my @never = grep { !$delivered{$_} } keys %produced;
is(scalar(@never), 0, 'every committed append was delivered at least once') or diag some(@never);
my @stray = grep { !exists $produced{$_} } keys %delivered;
is(scalar(@stray), 0, 'nothing was delivered that was not committed') or diag some(@stray);

my @rb_stored    = grep { $message{$_} } keys %rolled_back;
my @rb_delivered = grep { $delivered{$_} } keys %rolled_back;
is(scalar(@rb_stored),    0, 'no rolled-back id was stored');
is(scalar(@rb_delivered), 0, 'no rolled-back id was ever delivered');

my %effect;
$effect{$_}++ for @effects;
my @doubles     = grep { $effect{$_} > 1 } keys %effect;
my @no_effect   = grep { !$effect{$_} } keys %produced;
my @no_marker   = grep { !$markers{$_} } keys %produced;
my @odd_markers = grep { !exists $produced{$_} } keys %markers;
is(scalar(@effects),     $nproduced, 'as many effects as committed appends');
is(scalar(@doubles),     0,          'no effect applied twice') or diag some(@doubles);
is(scalar(@no_effect),   0,          'every committed append has its effect');
is(scalar(@no_marker) + scalar(@odd_markers), 0, 'one consume_once marker per committed append, and no other');

# Dead intervals and lives, from the revivals.
my %lives;    # id => [revival instants]
my @while_dead;
my %attempts_of;
push @{ $attempts_of{ $_->[0] } }, $_ for grep { $_->[2] eq 'delivered' } @attempts;
for my $r (@revived)
{
	my ($id, $dead_at, $revived_at) = @$r;
	push @{ $lives{$id} }, $revived_at;
	push @while_dead, grep { $_->[3] > $dead_at && $_->[3] < $revived_at } @{ $attempts_of{$id} // [] };
}
is(scalar(@while_dead), 0, 'no delivery started while its message was dead')
  or diag some(map { join(' ', @$_) } @while_dead);
my @overrun;
for my $id (keys %attempts_of)
{
	my @bounds = sort { $a <=> $b } @{ $lives{$id} // [] };
	my %per_life;
	for my $a (@{ $attempts_of{$id} })
	{
		my $life = grep { $_ < $a->[3] } @bounds;
		$per_life{$life}++;
	}
	push @overrun, "$id life $_: $per_life{$_}" for grep { $per_life{$_} > $max_attempts } keys %per_life;
}
is(scalar(@overrun), 0, "no life of a message had more than $max_attempts deliveries")
  or diag some(@overrun);

is(scalar(@anomalies), 0, 'no owner was refused complete, complete_many, fail or extend on its lease')
  or diag join("\n", map { "$_: $events{$_}" } @anomalies);
is($revive_failures, 0, 'retry_dead and retry_dead_topic revived every dead message they were given');

# The sessions ended only by crashes and stops: no other error.  What a
# psql says when its server goes away, or is not back yet:
my $fault_noise = join(
	'|',
	'terminating connection because of crash of another server process',
	'terminating connection due to (?:administrator|immediate shutdown) command',
	'The postmaster has commanded this server process',
	'In a moment you should be able to reconnect',
	'server closed the connection unexpectedly',
	'This probably means the server terminated abnormally',
	'before or while processing the request',
	'connection to server was lost',
	'the database system is (?:in recovery mode|starting up|shutting down|not (?:yet )?accepting connections)',
	'connection to server on socket',
	'Is the server running locally',
	'No such file or directory',
	'Connection refused',
	'^\\s*$');
my @session_errors;
for my $f (glob "$logdir/*.log")
{
	push @session_errors, map { "$f: $_" } grep { !/$fault_noise/ } split /\n/, slurp_file($f);
}
is(scalar(@session_errors), 0, 'the sessions saw no error but the faults')
  or diag some(@session_errors);

# The server log: one crash per SIGKILL, nothing else killed.
my $log     = slurp_file($node->logfile, $log_offset);
my $kills   = $faults{pull} + $faults{prod} + $faults{worker};
my @signals = ($log =~ /was terminated by signal (\d+)/g);
is(scalar(grep { $_ == 9 } @signals), $kills, "the log shows the $kills SIGKILLs sent");
is(scalar(grep { $_ != 9 } @signals), 0, 'and no other process killed by a signal');
is(scalar(() = $log =~ /received immediate shutdown request/g),
	$faults{immediate}, 'one immediate shutdown per restart');
unlike($log, qr/PANIC/, 'no PANIC');

# 5. The figures.
my %via;
my %what;
for my $a (@attempts)
{
	$what{ $a->[2] }++;
	$via{ $a->[1] eq 'worker' ? 'background worker' : 'pull workers' }++ if $a->[2] eq 'delivered';
}
my %by_topic;
$by_topic{$_}++ for values %produced;
my %dead_ids = map { $_->[0] => 1 } @revived;
my $restarts = 0;
$restarts += $_->{runs} - 1 for values %sessions;
diag sprintf("soak: %d s of load, then %.0f s of drain; seed %s", $load_seconds, time() - $drain_start, $seed);
diag sprintf("  appended ids           %d in producer transactions: %d committed, %d rolled back (none stored or delivered)",
	$nproduced + scalar(keys %rolled_back), $nproduced, scalar(keys %rolled_back));
diag sprintf("  messages               %d (%d remote, %d pull); at the end %d delivered, %d dead, %d leased; %d re-appends were no-ops",
	scalar(keys %message), $by_topic{remote} // 0, $by_topic{pull} // 0,
	scalar(grep { $_->[1] eq 't' } values %message), scalar(grep { $_->[2] eq 't' } values %message),
	scalar(@leased), $reappended);
diag sprintf("  deliveries             %d (%d by the background worker, %d by pull workers)",
	$what{delivered} // 0, $via{'background worker'} // 0, $via{'pull workers'} // 0);
my $redeliveries = ($what{delivered} // 0) - $nproduced;
diag sprintf("  redeliveries           %d: %d injected failures, %d found done by consume_once, %d cut short by a crash",
	$redeliveries, $what{failed} // 0, $what{duplicate} // 0,
	$redeliveries - ($what{failed} // 0) - ($what{duplicate} // 0));
diag sprintf("  pull workers           %d leases extended, %d deliveries left uncompleted, %d late leases let go",
	$events{extended} // 0, $events{abandoned} // 0, $events{late} // 0);
diag sprintf("  dead, then revived     %d revivals of %d messages", scalar(@revived), scalar(keys %dead_ids));
diag sprintf("  crashes survived       %d SIGKILLs (%d pull workers, %d producers, %d background worker), %d immediate restarts; %d session restarts",
	$kills, $faults{pull}, $faults{prod}, $faults{worker}, $faults{immediate}, $restarts);
diag sprintf("  losses %d, double effects %d", scalar(@never) + scalar(@no_effect), scalar(@doubles));

$node->stop;
done_testing();
