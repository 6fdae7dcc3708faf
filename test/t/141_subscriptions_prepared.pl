# Named subscriptions and two-phase commit: an append in a prepared
# transaction holds back the fresh read of a subscription only from its own
# position on; COMMIT PREPARED hands it out with everything after it, in
# position order, also when the server restarted while it was prepared;
# ROLLBACK PREPARED leaves no trace.  No message is lost and none is handed
# out again once completed.  Then, without shared_preload_libraries, a
# claim of a named subscription is refused with 55000 (the default
# subscription is still served), and with the library preloaded again the
# subscription reads what was appended meanwhile.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('subs_prepared');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
max_prepared_transactions = 5
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql(
	'app', q{
CREATE EXTENSION krizaka_outbox;
SELECT outbox.subscribe('orders', 's');
CREATE TABLE claimed (round integer, id uuid, n text, seq bigint, attempts integer);
});

sub append
{
	my ($n) = @_;
	$node->safe_psql('app', qq{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "$n"}')});
	return;
}

sub prepare
{
	my ($n, $gid) = @_;
	$node->safe_psql(
		'app', qq{
		BEGIN;
		SELECT outbox.append('orders', 'evt.order.v1', '{"n": "$n"}');
		PREPARE TRANSACTION '$gid';
	});
	return;
}

# One claim of subscription s (up to $batch messages), then the completion
# of what it leased: the n of the messages it handed out, in position order.
my $round = 0;

sub claim
{
	my ($batch) = @_;
	$round++;
	my @out = split /\n/, $node->safe_psql(
		'app', qq{
		WITH c AS (INSERT INTO claimed
		           SELECT $round, id, payload->>'n', seq, attempts
		             FROM outbox.claim('w', 'orders', $batch, 30, 's') RETURNING 1)
		SELECT count(*) FROM c;
		SELECT outbox.complete_many(coalesce(array_agg(id), '{}'), 'w', 's') FROM claimed WHERE round = $round;
		SELECT coalesce(string_agg(n, ' ' ORDER BY seq), '') FROM claimed WHERE round = $round;
	});
	die "claim round $round: leased $out[0], completed $out[1]" unless $out[0] == $out[1];
	return $out[2] // '';
}

# Claims of one message at a time until one finds nothing: the order in
# which the messages were handed out.
sub drain_one_by_one
{
	my @got;
	for (1 .. 20)
	{
		my $n = claim(1);
		last if $n eq '';
		push @got, $n;
	}
	return join(' ', @got);
}

#
# A prepared append: the messages before it are claimable, those after it
# wait for it; COMMIT PREPARED hands them all out, in position order.
#
append('a1');
append('a2');
prepare('p1', 'first');
append('b1');
append('b2');
is(claim(10), 'a1 a2', 'the messages appended before the prepared one are claimed');
is(claim(10), '', 'the prepared one and those after it are held back');
is($node->safe_psql('app', q{SELECT pending FROM outbox.subscription_stats WHERE subscription = 's'}),
	'2', 'subscription_stats counts the two committed messages after it as pending');
$node->safe_psql('app', q{COMMIT PREPARED 'first'});
is(drain_one_by_one(), 'p1 b1 b2',
	'after COMMIT PREPARED: the prepared message, then those after it, one claim each, in position order');
is(claim(10), '', 'and nothing else');

#
# Across an immediate restart while prepared.
#
prepare('q1', 'across');
append('c1');
is(claim(10), '', 'before the restart: the message after the prepared one waits');
$node->stop('immediate');
$node->start;
is($node->safe_psql('app', q{SELECT gid FROM pg_prepared_xacts}), 'across',
	'the prepared transaction survived the restart');
append('d1');
is(claim(10), '',
	'after the restart, while a transaction prepared before it is open: nothing is handed out');
$node->safe_psql('app', q{COMMIT PREPARED 'across'});
is(drain_one_by_one(), 'q1 c1 d1',
	'after COMMIT PREPARED: the prepared message and every one after it, in position order');
append('e1');
is(claim(10), 'e1', 'a later message is claimed alone: nothing completed is handed out again');
is(claim(10), '', 'and nothing else');

#
# ROLLBACK PREPARED: the message never appears.
#
prepare('r1', 'undone');
append('f1');
is(claim(10), '', 'while prepared: the message after it waits');
$node->safe_psql('app', q{ROLLBACK PREPARED 'undone'});
is(claim(10), 'f1', 'after ROLLBACK PREPARED: the message after it, and not the rolled-back one');
is(claim(10), '', 'and nothing else');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE payload->>'n' = 'r1'}),
	'0', 'the rolled-back append left no message');

is($node->safe_psql('app', q{SELECT string_agg(n, ' ' ORDER BY seq) FROM claimed}),
	'a1 a2 p1 b1 b2 q1 c1 d1 e1 f1', 'subscription s got every committed message');
is($node->safe_psql('app', q{SELECT count(*) FROM claimed WHERE attempts <> 1}),
	'0', 'each once, on its first attempt');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.subscription_state}),
	'0', 'no state is left');
is($node->safe_psql('app', q{
	SELECT concat_ws('|', pending, in_flight, dead) FROM outbox.subscription_stats WHERE subscription = 's'}),
	'0|0|0', 'subscription_stats: nothing pending, in flight or dead');

#
# Without shared_preload_libraries.
#
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''");
$node->restart;
append('g1');
for my $call (
	q{SELECT * FROM outbox.claim('w', 'orders', 10, 30, 's')},
	q{SELECT * FROM outbox.complete_and_claim('{}', 'w', 'orders', 10, 30, 's')})
{
	my ($rc, $out, $err) = $node->psql('app', "\\set VERBOSITY verbose\n$call");
	isnt($rc, 0, "not preloaded: $call fails");
	like($err, qr/ERROR:  55000: /, 'with SQLSTATE 55000');
	like($err, qr/HINT:  .*shared_preload_libraries/, 'and a hint that names shared_preload_libraries');
}
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.subscription_state}),
	'0', 'the refused claims left no state');
is($node->safe_psql('app', q{
	SELECT string_agg(payload->>'n', ' ' ORDER BY seq) FROM outbox.claim('d', 'orders', 100, 30)}),
	'a1 a2 p1 b1 b2 q1 c1 d1 e1 f1 g1', 'the default subscription is served without the library preloaded');

$node->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$node->restart;
is(claim(10), 'g1', 'preloaded again: the subscription reads what was appended meanwhile');
is(claim(10), '', 'and nothing else');

$node->stop;
done_testing();
