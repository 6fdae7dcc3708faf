# Soak of named subscriptions: topic orders has three named subscriptions
# (search, email, billing) besides its default one.  Producers append
# messages with ordering keys (20 keys, and some without a key), one to
# four per transaction, keep the transaction open a moment after each
# append (so that claims pass over appends in progress), and roll back a
# fifth of their transactions (the payload says so).  Two pull workers per subscription claim and record
# what they process in the transaction that completes it (complete_many;
# the workers of email complete with complete_and_claim), failing a share
# of the messages on purpose so that they are retried.  Meanwhile, in each
# subscription, a worker that holds leases is terminated so that its short
# leases run out and others take over, and the cluster is shut down
# immediately and started again.  Then everything drains, and for the
# default subscription and each named one:
#
#   - every committed message was delivered at least once, and nothing
#     else was: no message of a rolled-back transaction was stored or
#     delivered;
#   - for each ordering key, the first deliveries came in position order;
#   - the messages the terminated worker held were delivered by others, on
#     a later attempt;
#   - no owner was refused complete, complete_many or fail on a lease it
#     held, nothing is dead, and subscription_stats shows nothing pending;
#   - purge('0 seconds') then deletes every message, and no state is left.
#
# The load lasts KRIZAKA_SOAK_SECONDS seconds (default 40, at least 20).
# KRIZAKA_SOAK_SEED repeats the choices of the sessions (keys, sizes and
# fates of transactions, random failures); timing varies from run to run.
use strict;
use warnings;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $load_seconds = $ENV{KRIZAKA_SOAK_SECONDS} || 40;
die "KRIZAKA_SOAK_SECONDS must be a number of seconds, at least 20\n"
  unless $load_seconds =~ /^\d+$/ && $load_seconds >= 20;
my $seed = $ENV{KRIZAKA_SOAK_SEED} // (time() * 1000 ^ $$) % 1_000_000;
srand($seed);
note "seed $seed, load for $load_seconds s";

my @subs   = qw(default search email billing);
my $lease  = 15;    # the workers' leases
my $short  = 10;    # the leases of the worker that is terminated (the shortest allowed)
my $nprods = 3;

my $node = PostgreSQL::Test::Cluster->new('subs_soak');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'krizaka_outbox'
max_connections = 60
outbox.max_attempts = 50
outbox.backoff_seconds = 1
outbox.backoff_max_seconds = 2
log_statement = none
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');

$node->safe_psql(
	'app', q{
CREATE EXTENSION krizaka_outbox;
SELECT outbox.subscribe('orders', s) FROM unnest(ARRAY['search', 'email', 'billing']) s;
CREATE SCHEMA soak;
CREATE TABLE soak.control (stop_producers boolean NOT NULL, stop_consumers boolean NOT NULL);
INSERT INTO soak.control VALUES (false, false);
CREATE SEQUENCE soak.n;
CREATE SEQUENCE soak.rolled_back;
-- what the producers committed, in the transaction of the append
CREATE TABLE soak.produced (id uuid PRIMARY KEY, n bigint NOT NULL, key text);
-- what the workers processed, in the transaction that completes it (or,
-- with complete_and_claim, in the one before the completion)
CREATE TABLE soak.delivery (
	n bigserial PRIMARY KEY, sub text NOT NULL, id uuid NOT NULL, seq bigint NOT NULL,
	key text, owner text NOT NULL, attempt integer NOT NULL, rb boolean NOT NULL,
	at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE soak.failure (sub text, id uuid, owner text, attempt integer);
-- outcomes refused to the owner of a lease: none expected
CREATE TABLE soak.refused (sub text, what text, ids uuid[], owner text, got bigint,
	at timestamptz DEFAULT clock_timestamp());

-- one producer: transactions of one to four appends, keys in ascending
-- order (appends of a key wait for each other: no deadlock), a fifth of
-- them rolled back; the payload says which
CREATE PROCEDURE soak.produce(name text, seed float8) LANGUAGE plpgsql AS $$
DECLARE
	rb boolean;
	k text;
	keys text[];
	mid uuid;
	v bigint;
BEGIN
	PERFORM setseed(seed);
	LOOP
		EXIT WHEN (SELECT stop_producers FROM soak.control);
		rb := random() < 0.2;
		SELECT array_agg(x ORDER BY x NULLS FIRST) INTO keys
		  FROM (SELECT CASE WHEN random() < 0.1 THEN NULL
		                    ELSE 'k' || lpad((1 + floor(random() * 20))::int::text, 2, '0') END AS x
		          FROM generate_series(1, 1 + floor(random() * 4)::int)) s;
		FOREACH k IN ARRAY keys LOOP
			v := nextval('soak.n');
			mid := outbox.append('orders', 'evt.order.v1',
				jsonb_build_object('n', v, 'producer', name, 'rb', rb), NULL, NULL, k);
			IF rb THEN
				PERFORM nextval('soak.rolled_back');
			ELSE
				INSERT INTO soak.produced VALUES (mid, v, k);
			END IF;
			-- the transaction stays open a moment after each append: claims
			-- pass over appends in progress
			PERFORM pg_sleep(random() * 0.02);
		END LOOP;
		IF rb THEN ROLLBACK; ELSE COMMIT; END IF;
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;

-- whether a worker fails this delivery: a fifth of the messages on their
-- first attempt in the subscription, and one delivery in twenty at random
CREATE FUNCTION soak.should_fail(m outbox.message, sub text) RETURNS boolean
LANGUAGE sql AS $$
	SELECT (m.attempts = 1
	        AND ('x' || substr(md5(m.id::text || coalesce(sub, 'default')), 1, 7))::bit(28)::int % 5 = 0)
	    OR random() < 0.05
$$;

-- one pull worker of subscription sub (NULL: the default one): claim in a
-- transaction of its own, then record, fail and complete in the next (with
-- complete_and_claim: complete with the next claim)
CREATE PROCEDURE soak.consume(sub text, owner text, cac boolean, lease integer, seed float8)
LANGUAGE plpgsql AS $$
DECLARE
	batch outbox.message[];
	m outbox.message;
	ok uuid[];
	prev uuid[] := '{}';
	got bigint;
BEGIN
	PERFORM setseed(seed);
	LOOP
		EXIT WHEN (SELECT stop_consumers FROM soak.control);
		IF cac THEN
			SELECT coalesce(array_agg(c ORDER BY c.seq), '{}') INTO batch
			  FROM outbox.complete_and_claim(prev, owner, 'orders', 20, lease, sub) c;
		ELSE
			SELECT coalesce(array_agg(c ORDER BY c.seq), '{}') INTO batch
			  FROM outbox.claim(owner, 'orders', 20, lease, sub) c;
		END IF;
		COMMIT;
		ok := '{}';
		FOREACH m IN ARRAY batch LOOP
			IF soak.should_fail(m, sub) THEN
				INSERT INTO soak.failure VALUES (coalesce(sub, 'default'), m.id, owner, m.attempts);
				IF NOT outbox.fail(m.id, owner, 'injected failure', sub) THEN
					INSERT INTO soak.refused (sub, what, ids, owner, got)
					VALUES (coalesce(sub, 'default'), 'fail', ARRAY[m.id], owner, 0);
				END IF;
			ELSE
				INSERT INTO soak.delivery (sub, id, seq, key, owner, attempt, rb)
				VALUES (coalesce(sub, 'default'), m.id, m.seq, m.ordering_key, owner, m.attempts,
				        (m.payload->>'rb')::boolean);
				ok := ok || m.id;
			END IF;
		END LOOP;
		IF cac THEN
			prev := ok;
		ELSIF cardinality(ok) > 0 THEN
			got := outbox.complete_many(ok, owner, sub);
			IF got <> cardinality(ok) THEN
				INSERT INTO soak.refused (sub, what, ids, owner, got)
				VALUES (coalesce(sub, 'default'), 'complete_many', ok, owner, got);
			END IF;
		END IF;
		COMMIT;
		IF cardinality(batch) = 0 THEN
			PERFORM pg_sleep(0.02);
		END IF;
	END LOOP;
	IF cardinality(prev) > 0 THEN
		got := outbox.complete_many(prev, owner, sub);
		IF got <> cardinality(prev) THEN
			INSERT INTO soak.refused (sub, what, ids, owner, got)
			VALUES (coalesce(sub, 'default'), 'complete_many', prev, owner, got);
		END IF;
	END IF;
END $$;

-- a worker that claims until it holds leases, then hangs
CREATE PROCEDURE soak.hang(sub text, owner text, lease integer) LANGUAGE plpgsql AS $$
DECLARE
	got bigint;
BEGIN
	LOOP
		SELECT count(*) INTO got FROM outbox.claim(owner, 'orders', 5, lease, sub);
		COMMIT;
		EXIT WHEN got > 0;
		PERFORM pg_sleep(0.01);
	END LOOP;
	PERFORM pg_sleep(3600);
END $$;
});

# Sessions: a psql running one CALL for as long as the test wants, started
# again whenever it ends while it should run (the restart took its backend).
my $logdir = $PostgreSQL::Test::Utils::tmp_check . '/subs_soak_sessions';
mkdir $logdir;
my %sessions;

sub sql_sub
{
	my ($sub) = @_;
	return $sub eq 'default' ? 'NULL' : "'$sub'";
}

for my $i (1 .. $nprods)
{
	$sessions{"prod-$i"} = {
		kind => 'prod',
		call => sub { sprintf("CALL soak.produce('prod-$i', %.6f)", rand(2) - 1) }
	};
}
for my $sub (@subs)
{
	for my $i (1 .. 2)
	{
		my $cac = $sub eq 'email' ? 'true' : 'false';
		$sessions{"cons-$sub-$i"} = {
			kind => 'cons',
			call => sub {
				my ($run) = @_;
				sprintf("CALL soak.consume(%s, '%s-%d.%d', %s, %d, %.6f)",
					sql_sub($sub), $sub, $i, $run, $cac, $lease, rand(2) - 1);
			}
		};
	}
	$sessions{"hang-$sub"} = {
		kind => 'hang',
		call => sub { sprintf("CALL soak.hang(%s, 'hang-%s', %d)", sql_sub($sub), $sub, $short) }
	};
}
$_->{runs} = 0 for values %sessions;

# Start session $name: fork a psql that runs its CALL.
sub start_session
{
	my ($name) = @_;
	my $s   = $sessions{$name};
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
		$s->{pid}   = undef;
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

sub rows
{
	my ($sql) = @_;
	return map { [ split /\|/, $_, -1 ] } grep { length } split /\n/, $node->safe_psql('app', $sql);
}

# At most ten of a list, for diagnostics.
sub some
{
	my @list = grep { defined } @_;
	splice(@list, 10) if @list > 10;
	return join("\n", @list);
}

# The leases a subscription's owner holds now: id => attempt.
sub leases_of
{
	my ($sub, $owner) = @_;
	my $sql =
	  $sub eq 'default'
	  ? qq{SELECT id, attempts FROM outbox.message
	        WHERE topic = 'orders' AND lease_owner = '$owner' AND delivered_at IS NULL
	          AND dead_at IS NULL AND leased_until IS NOT NULL}
	  : qq{SELECT x.id, x.attempts FROM outbox.subscription_state x
	         JOIN outbox.subscription s USING (sub_id)
	        WHERE s.topic = 'orders' AND s.name = '$sub' AND x.lease_owner = '$owner'
	          AND x.dead_at IS NULL AND x.leased_until IS NOT NULL
	       UNION ALL
	       SELECT m.id, 1 FROM outbox.subscription_lease l
	         JOIN outbox.subscription s USING (sub_id)
	         CROSS JOIN unnest(l.seqs) AS q(seq)
	         JOIN outbox.message m ON m.topic = s.topic AND m.seq = q.seq
	        WHERE s.topic = 'orders' AND s.name = '$sub' AND l.lease_owner = '$owner'};
	return map { $_->[0] => $_->[1] } rows($sql);
}

# Terminate, in each subscription, a worker that holds leases.
my %hung;    # sub => { id => attempt }
my $terminated = 0;

sub terminate_hung_workers
{
	for my $sub (@subs)
	{
		start_session("hang-$sub");
	}
	for my $sub (@subs)
	{
		my $s     = $sessions{"hang-$sub"};
		my $until = time() + 60;
		my %held;
		while (time() < $until)
		{
			keep_sessions('prod', 'cons');
			%held = leases_of($sub, "hang-$sub");
			last if %held;
			usleep(50_000);
		}
		ok(scalar(%held), "$sub: the worker to be terminated holds leases")
		  or next;
		$hung{$sub} = \%held;
		my $pid = $node->safe_psql('app',
			"SELECT pid FROM pg_stat_activity WHERE application_name = 'soak-hang-$sub'");
		is($node->safe_psql('app', "SELECT pg_terminate_backend($pid)"), 't',
			"$sub: its backend is terminated with " . scalar(keys %held) . ' leases');
		$terminated++;
	}
	ok(wait_sessions_ended(30, 'hang'), 'the terminated workers are gone');
	return;
}

my $log_offset = -s $node->logfile;

# 1. The load: terminated workers after a third of it, an immediate
# restart in the middle.
my $t0 = time();
my ($terminate_at, $restart_at) = ($t0 + $load_seconds / 3, $t0 + $load_seconds / 2);
my ($restarted, $leased_at_restart, $max_holes) = (0, 0, 0);
while (time() < $t0 + $load_seconds)
{
	keep_sessions('prod', 'cons');
	if (!%hung && time() >= $terminate_at)
	{
		terminate_hung_workers();
	}
	if (!$restarted && time() >= $restart_at)
	{
		# at a moment when workers hold leases, if one comes within 5 s
		my $until = time() + 5;
		do
		{
			keep_sessions('prod', 'cons');
			$leased_at_restart = $node->safe_psql('app', q{
				SELECT (SELECT count(*) FROM outbox.subscription_state WHERE leased_until > now())
				     + (SELECT coalesce(sum(cardinality(seqs)), 0) FROM outbox.subscription_lease
				         WHERE leased_until > now())
				     + (SELECT count(*) FROM outbox.message WHERE leased_until > now() AND delivered_at IS NULL)});
		} while ($leased_at_restart == 0 && time() < $until);
		note sprintf('%.1f s: immediate shutdown and restart, %d leases held',
			time() - $t0, $leased_at_restart);
		$node->stop('immediate');
		reap_sessions();
		$node->start;
		$restarted = 1;
	}
	my ($rc, $holes) = $node->psql('app', 'SELECT count(*) FROM outbox.subscription_state WHERE hole');
	$max_holes = $holes if $rc == 0 && $holes > $max_holes;
	usleep(100_000);
}
ok($restarted, 'the cluster was shut down immediately and started again during the load');
is($terminated, scalar(@subs), 'a worker holding leases was terminated in every subscription');
cmp_ok($max_holes, '>', 0, "claims passed over appends in progress (up to $max_holes holes at once)");

# 2. Drain: the producers stop, the workers go on until nothing is pending.
$node->safe_psql('app', 'UPDATE soak.control SET stop_producers = true');
ok(wait_sessions_ended(30, 'prod'), 'the producers stopped');
my $stats = q{
	SELECT string_agg(concat_ws('|', coalesce(subscription, 'default'), pending, in_flight, dead, state), ','
	                  ORDER BY subscription NULLS FIRST)
	  FROM outbox.subscription_stats WHERE topic = 'orders'};
my $done = 'default|0|0|0|active,billing|0|0|0|active,email|0|0|0|active,search|0|0|0|active';
my $drain_start = time();
my $drained     = 0;
my $last_stats  = '';
while (time() < $drain_start + 120)
{
	keep_sessions('cons');
	my ($rc, $out) = $node->psql('app', $stats);
	$last_stats = $out if $rc == 0;
	if ($rc == 0 && $out eq $done)
	{
		$drained = 1;
		last;
	}
	usleep(200_000);
}
ok($drained, sprintf('subscription_stats shows nothing pending, in flight or dead %.0f s after the load', time() - $drain_start))
  or diag "last: $last_stats";
$node->safe_psql('app', 'UPDATE soak.control SET stop_consumers = true');
ok(wait_sessions_ended(30, 'cons'), 'the workers stopped');

# 3. The invariants.
my %message = map { $_->[0] => $_ } rows(
	q{SELECT id, seq, ordering_key, payload->>'rb', delivered_at IS NOT NULL, dead_at IS NOT NULL
	    FROM outbox.message WHERE topic = 'orders'});
my %produced    = map { $_->[0] => 1 } rows('SELECT id FROM soak.produced');
my $rolled_back = $node->safe_psql('app', 'SELECT last_value FROM soak.rolled_back');
my $nmessages   = keys %message;
cmp_ok($nmessages, '>', 500, "a load worth the name: $nmessages committed messages");
cmp_ok($rolled_back, '>', 100, 'with rolled-back appends besides');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic <> 'orders'}), '0',
	'no other topic');
my @not_stored = grep { !$message{$_} } keys %produced;
my @unexpected = grep { !$produced{$_} } keys %message;
is(scalar(@not_stored), 0, 'every committed append is in the outbox') or diag some(@not_stored);
is(scalar(@unexpected), 0, 'the outbox holds no message its producer did not commit') or diag some(@unexpected);
is(scalar(grep { $_->[3] ne 'false' } values %message), 0, 'no message of a rolled-back transaction was stored');
cmp_ok($node->safe_psql('app', q{SELECT count(DISTINCT ordering_key) FROM outbox.message}), '==', 20,
	'on 20 ordering keys');
cmp_ok($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE ordering_key IS NULL}), '>', 0,
	'and some messages without a key');
cmp_ok($node->safe_psql('app', q{
	SELECT count(*) FROM (SELECT 1 FROM soak.produced p JOIN outbox.message m USING (id)
	                       GROUP BY m.created_at, m.payload->>'producer' HAVING count(*) > 1) t}), '>', 0,
	'and transactions of several appends');

is($node->safe_psql('app', 'SELECT count(*) FROM outbox.message WHERE dead_at IS NOT NULL'),
	'0', 'default: nothing is dead');
is($node->safe_psql('app', 'SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL'),
	'0', 'default: every message is delivered');
is($node->safe_psql('app', 'SELECT count(*) FROM outbox.subscription_state'),
	'0', 'named subscriptions: no state row is left (nothing leased, retrying, blocked or dead)');
is($node->safe_psql('app', q{
	SELECT (SELECT count(*) FROM outbox.subscription_lease) || '|'
	       || (SELECT count(*) FROM outbox.subscription_key)}),
	'0|0', 'named subscriptions: no lease by range and no key held is left');

my %first;    # sub => id => [n, seq, key, owner, attempt]
my %deliveries;
for my $d (rows(q{SELECT sub, id, n, seq, coalesce(key, ''), owner, attempt, rb FROM soak.delivery ORDER BY n}))
{
	my ($sub, $id, $n, $seq, $key, $owner, $attempt, $rb) = @$d;
	$deliveries{$sub}++;
	$first{$sub}{$id} //= [ $n, $seq, $key, $owner, $attempt, $rb ];
}
my %failures = map { $_->[0] => $_->[1] } rows('SELECT sub, count(*) FROM soak.failure GROUP BY sub');
for my $sub (@subs)
{
	my $f       = $first{$sub} // {};
	my @never   = grep { !$f->{$_} } keys %message;
	my @stray   = grep { !$message{$_} } keys %$f;
	my @rb      = grep { $f->{$_}[5] ne 'f' } keys %$f;
	my @wrong   = grep { $message{$_} && $f->{$_}[1] ne $message{$_}[1] } keys %$f;
	is(scalar(@never), 0, "$sub: every committed message was delivered at least once") or diag some(@never);
	is(scalar(@stray), 0, "$sub: nothing was delivered that is not a committed message") or diag some(@stray);
	is(scalar(@rb),    0, "$sub: no message of a rolled-back transaction was delivered") or diag some(@rb);
	is(scalar(@wrong), 0, "$sub: each delivery was of the message at its position") or diag some(@wrong);

	# key order: the first deliveries of each key, in delivery order, have
	# growing positions
	my %by_key;
	for my $id (sort { $f->{$a}[0] <=> $f->{$b}[0] } keys %$f)
	{
		my ($n, $seq, $key) = @{ $f->{$id} };
		next if $key eq '';
		push @{ $by_key{$key} }, [ $seq, $n, $id ];
	}
	my @out_of_order;
	for my $key (sort keys %by_key)
	{
		my $list = $by_key{$key};
		for my $i (1 .. $#$list)
		{
			push @out_of_order,
			  sprintf('key %s: seq %d (%s) first delivered as n=%d after seq %d (%s) as n=%d',
				$key, $list->[$i][0], $list->[$i][2], $list->[$i][1],
				$list->[ $i - 1 ][0], $list->[ $i - 1 ][2], $list->[ $i - 1 ][1])
			  if $list->[$i][0] <= $list->[ $i - 1 ][0];
		}
	}
	is(scalar(@out_of_order), 0, "$sub: for every key, the first deliveries came in position order")
	  or diag some(@out_of_order);
	cmp_ok(scalar(keys %by_key), '==', 20, "$sub: deliveries on all 20 keys");

	my @retried = grep { $f->{$_}[4] > 1 } keys %$f;
	cmp_ok($failures{$sub} // 0, '>', 0, "$sub: failures were injected");
	cmp_ok(scalar(@retried), '>', 0, "$sub: messages were delivered on a later attempt");

	my $held = $hung{$sub} // {};
	my @not_taken_over = grep {
		!$f->{$_} || $f->{$_}[3] eq "hang-$sub" || $f->{$_}[4] <= $held->{$_}
	} keys %$held;
	is(scalar(@not_taken_over), 0,
		"$sub: the messages the terminated worker held were delivered by others, on a later attempt")
	  or diag some(map { "$_: " . join(' ', @{ $f->{$_} // [] }) } @not_taken_over);
}
my @refused = rows('SELECT sub, what, owner, got, ids FROM soak.refused');
is(scalar(@refused), 0, 'no owner was refused complete_many or fail on a lease it held')
  or diag some(map { join(' ', @$_) } @refused);

# The sessions ended only by the restart, the termination and their stops:
# no other error.  What a psql says when its server goes away:
my $fault_noise = join(
	'|',
	'terminating connection due to (?:administrator|immediate shutdown) command',
	'server closed the connection unexpectedly',
	'This probably means the server terminated abnormally',
	'before or while processing the request',
	'connection to server was lost',
	'the database system is (?:in recovery mode|starting up|shutting down|not (?:yet )?accepting connections)',
	'connection to server on socket',
	'Is the server running locally',
	'No such file or directory',
	'Connection refused',
	# the context of the terminated workers' termination
	'^CONTEXT:  SQL statement "SELECT pg_sleep\\(3600\\)"',
	'^PL/pgSQL function soak\\.hang\\(text,text,integer\\) line \\d+ at PERFORM',
	'^\\s*$');
my @session_errors;
for my $f (glob "$logdir/*.log")
{
	push @session_errors, map { "$f: $_" } grep { !/$fault_noise/ } split /\n/, slurp_file($f);
}
is(scalar(@session_errors), 0, 'the sessions saw no error but the faults')
  or diag some(@session_errors);
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/PANIC|was terminated by signal/, 'no server process crashed');

# 4. Purge: every subscription is done with every message.
is($node->safe_psql('app', q{SELECT outbox.purge('0 seconds')}), $nmessages,
	"purge('0 seconds') deletes all $nmessages messages");
is($node->safe_psql('app', 'SELECT count(*) FROM outbox.message'), '0', 'none is left');
is($node->safe_psql('app', $stats), 'billing|0|0|0|active,email|0|0|0|active,search|0|0|0|active',
	'subscription_stats: the named subscriptions remain, with nothing pending; the default row went with the messages');

# 5. The figures.
my $redeliveries = 0;
my $total        = 0;
for my $sub (@subs)
{
	$total += $deliveries{$sub} // 0;
	$redeliveries += ($deliveries{$sub} // 0) - scalar(keys %{ $first{$sub} // {} });
}
my $restarts = 0;
$restarts += $_->{runs} - 1 for grep { $_->{kind} ne 'hang' } values %sessions;
diag sprintf('subscriptions soak: %d s of load, then %.0f s of drain; seed %s', $load_seconds,
	time() - $drain_start, $seed);
diag sprintf('  %d committed messages, %d rolled-back appends; %d deliveries over 4 subscriptions, %d of them again',
	$nmessages, $rolled_back, $total, $redeliveries);
diag sprintf('  injected failures: %s', join(', ', map { "$_ " . ($failures{$_} // 0) } @subs));
diag sprintf('  %d leases held at the immediate restart; %d session restarts; the terminated workers held %s',
	$leased_at_restart, $restarts, join(', ', map { "$_ " . scalar(keys %{ $hung{$_} // {} }) } @subs));

$node->stop;
done_testing();
