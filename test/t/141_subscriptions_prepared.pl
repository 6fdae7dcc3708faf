# Named subscriptions and two-phase commit: an append in a prepared
# transaction holds back only itself and the later messages of its ordering
# key; the claims hand out the messages before and after it meanwhile, and
# COMMIT PREPARED hands it out, also when the server restarted while it was
# prepared.  ROLLBACK PREPARED leaves no trace and frees its key; so does
# a rollback to a savepoint.  No message is lost and none is handed out
# again once completed.  Then,
# without shared_preload_libraries, a claim of a named subscription is
# refused with 55000 (the default subscription is still served), and with
# the library preloaded again the subscription reads what was appended
# meanwhile.
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

# Append message $n (with ordering key $key), committed or prepared as $gid.
sub append
{
	my ($n, $key) = @_;
	my $k = defined $key ? "'$key'" : 'NULL';
	$node->safe_psql('app', qq{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "$n"}', ordering_key => $k)});
	return;
}

sub prepare
{
	my ($n, $gid, $key) = @_;
	my $k = defined $key ? "'$key'" : 'NULL';
	$node->safe_psql(
		'app', qq{
		BEGIN;
		SELECT outbox.append('orders', 'evt.order.v1', '{"n": "$n"}', ordering_key => $k);
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
# A prepared append holds back only itself: the messages before and after
# it are claimed; COMMIT PREPARED hands it out.
#
append('a1');
prepare('p1', 'first');
append('b1');
is(claim(10), 'a1 b1', 'the messages before and after the prepared one are claimed');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.subscription_state WHERE hole}),
	'1', 'the subscription keeps a hole for it');
is(claim(10), '', 'nothing else while it is prepared');
$node->safe_psql('app', q{COMMIT PREPARED 'first'});
is(claim(10), 'p1', 'after COMMIT PREPARED: the prepared message');
is(claim(10), '', 'and nothing else');

#
# With an ordering key: the later messages of the key come after it.
#
append('k0', 'K');
is(claim(10), 'k0', 'a message of key K');
prepare('p2', 'keyed', 'K');
is(claim(10), '', 'a prepared message of key K is not handed out');
$node->safe_psql('app', q{COMMIT PREPARED 'keyed'});
append('k2', 'K');
append('z1');
is(claim(10), 'p2 z1',
	'after COMMIT PREPARED: the prepared message and the later message without a key, not the next one of key K');
is(claim(10), 'k2', 'the next one of key K once the prepared one is completed');
is(claim(10), '', 'and nothing else');

#
# Across an immediate restart while prepared: one prepared append was
# passed over by a claim before the restart, one was not.
#
prepare('q1', 'across', 'Q');
append('c1');
is(claim(10), 'c1', 'before the restart: the message after the prepared one');
prepare('q2', 'unseen');
append('c2');
$node->stop('immediate');
$node->start;
is($node->safe_psql('app', q{SELECT string_agg(gid, ' ' ORDER BY gid) FROM pg_prepared_xacts}),
	'across unseen', 'both prepared transactions survived the restart');
append('d1');
is(claim(10), 'c2 d1', 'after the restart: the committed messages, not the prepared ones');
is(claim(10), '', 'and nothing else');
$node->safe_psql('app', q{COMMIT PREPARED 'across'});
$node->safe_psql('app', q{COMMIT PREPARED 'unseen'});
is(claim(10), 'q1 q2', 'after COMMIT PREPARED: both prepared messages');
is(claim(10), '', 'and nothing else');
append('e1');
is(claim(10), 'e1', 'a later message is claimed alone: nothing completed is handed out again');
is(claim(10), '', 'and nothing else');

#
# ROLLBACK PREPARED: the message never appears, and its key is free.
#
prepare('r1', 'undone', 'R');
append('f1');
is(claim(10), 'f1', 'while prepared: the message after it');
$node->safe_psql('app', q{ROLLBACK PREPARED 'undone'});
append('r2', 'R');
is(claim(10), 'r2', 'after ROLLBACK PREPARED: the next message of its key, and not the rolled-back one');
is(claim(10), '', 'and nothing else');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE payload->>'n' = 'r1'}),
	'0', 'the rolled-back append left no message');

#
# A prepared append ahead of another append in progress: once the other
# commits, a claim of one message hands it out.
#
prepare('h1', 'ahead');
my $open = $node->background_psql('app');
$open->query_safe(q{BEGIN});
$open->query_safe(q{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "y1"}')});
is(claim(1), '', 'both appends in progress: a claim of one message finds nothing');
$open->query_safe(q{COMMIT});
$open->quit;
is(claim(1), 'y1', 'the committed one is handed out while the prepared one is still open');
$node->safe_psql('app', q{COMMIT PREPARED 'ahead'});
is(claim(10), 'h1', 'and the prepared one once it commits');
is(claim(10), '', 'and nothing else');

#
# Appends in savepoints of a transaction in progress: a released one
# waits for its transaction, a rolled-back one never appears.
#
$open = $node->background_psql('app');
$open->query_safe(q{BEGIN});
$open->query_safe(q{SAVEPOINT a});
$open->query_safe(q{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "released"}', ordering_key => 'S')});
$open->query_safe(q{RELEASE a});
is(claim(10), '', 'an append in a released savepoint waits for its transaction');
$open->query_safe(q{ROLLBACK});
is(claim(10), '', 'and never appears once the transaction rolls back');
$open->query_safe(q{BEGIN});
$open->query_safe(q{SAVEPOINT a});
$open->query_safe(q{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "undone"}', ordering_key => 'S')});
is(claim(10), '', 'an append in a savepoint in progress is not handed out');
$open->query_safe(q{ROLLBACK TO SAVEPOINT a});
$open->query_safe(q{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "kept"}', ordering_key => 'S')});
$open->query_safe(q{SAVEPOINT b});
$open->query_safe(q{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "sub"}', ordering_key => 'S')});
$open->query_safe(q{RELEASE b});
$open->query_safe(q{SELECT outbox.append('orders', 'evt.order.v1', '{"n": "top"}', ordering_key => 'S')});
is(claim(10), '', 'nothing while the transaction is open');
$open->query_safe(q{COMMIT});
$open->quit;
is(claim(10), 'kept', 'after the commit: the first message of its key, not the one rolled back to its savepoint');
is(claim(10), 'sub', 'then the one of the released savepoint');
is(claim(10), 'top', 'then the last one');
is(claim(10), '', 'and nothing else');

is($node->safe_psql('app', q{SELECT string_agg(n, ' ' ORDER BY seq) FROM claimed}),
	'a1 p1 b1 k0 p2 k2 z1 q1 c1 q2 c2 d1 e1 f1 r2 h1 y1 kept sub top',
	'subscription s got every committed message');
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
my @default;
for (1 .. 5)
{
	my $got = $node->safe_psql('app', q{
		WITH c AS (SELECT * FROM outbox.claim('d', 'orders', 100, 30))
		SELECT coalesce(string_agg(payload->>'n', ' ' ORDER BY seq), '') FROM c WHERE outbox.complete(id, 'd')});
	last if $got eq '';
	push @default, $got;
}
is(join(' / ', @default), 'a1 p1 b1 k0 z1 q1 c1 q2 c2 d1 e1 f1 r2 h1 y1 kept g1 / p2 sub / k2 top',
	'the default subscription is served without the library preloaded, one message of key K per claim');

$node->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$node->restart;
is(claim(10), 'g1', 'preloaded again: the subscription reads what was appended meanwhile');
is(claim(10), '', 'and nothing else');

$node->stop;
done_testing();
