# drain_once through a NOTIFY route, received by a real listener: the
# envelope as the twins expect it, nothing from rolled-back transactions,
# large envelopes truncated, and the notification tied to the commit.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('notify');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.route_notify('credits', 'credits_events');
});

# A listener that collects what arrives on the channel.
my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN credits_events');
my $received = '';

# Poll the listener until $count notifications have arrived, or time out.
sub wait_notifications
{
	my ($count) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		$received .= $listener->query_safe('SELECT 1');
		my @n = ($received =~ /Asynchronous notification "credits_events" with payload/g);
		return scalar(@n) if @n >= $count;
		select(undef, undef, undef, 0.02);
	}
	my @n = ($received =~ /Asynchronous notification "credits_events" with payload/g);
	return scalar(@n);
}

# The payloads received, in order.
sub payloads
{
	return ($received =~ /with payload "(.*)" received from server process/g);
}

# One committed and one rolled-back append; then a drain.
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox.append('credits', 'evt.coupon.redeemed.v1', '{"redemptionId": 41}',
		'01890a5d-ac96-774b-bcce-b302099a8057');
	UPDATE outbox.message SET created_at = '2026-03-04 05:06:07.891999+00'
	 WHERE id = '01890a5d-ac96-774b-bcce-b302099a8057';
	COMMIT;
	BEGIN;
	SELECT outbox.append('credits', 'evt.coupon.redeemed.v1', '{"redemptionId": 42}',
		'01890a5d-ac96-774b-bcce-b302099a8058');
	ROLLBACK;
});
is($node->safe_psql('postgres', 'SELECT outbox.drain_once()'), '1', 'drain_once delivers the committed message');
is(wait_notifications(1), 1, 'one notification arrives');
my @p = payloads();
is($p[0],
	'{"id": "01890a5d-ac96-774b-bcce-b302099a8057", "type": "evt.coupon.redeemed.v1", "payload": {"redemptionId": 41}, "occurredAt": "2026-03-04T05:06:07.891Z"}',
	'the payload is the envelope, occurredAt truncated to milliseconds');
unlike($received, qr/"redemptionId": 42/, 'the rolled-back append never arrives');
is($node->safe_psql('postgres',
	"SELECT delivered_at IS NOT NULL AND leased_until IS NULL FROM outbox.message WHERE id = '01890a5d-ac96-774b-bcce-b302099a8057'"),
	't', 'the message is complete');

# A drain whose transaction rolls back sends nothing and completes nothing.
$received = '';
$node->safe_psql('postgres', q{SELECT outbox.append('credits', 'evt.x.v1', '{"n": 1}')});
$node->safe_psql('postgres', q{BEGIN; SELECT outbox.drain_once(); ROLLBACK;});
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox.message WHERE payload @> '{"n": 1}' AND delivered_at IS NULL AND attempts = 0}),
	'1', 'a rolled-back drain leaves the message as it was');
is($node->safe_psql('postgres', 'SELECT outbox.drain_once()'), '1', 'the next drain delivers it');
is(wait_notifications(1), 1, 'and only then it is received');

# An envelope over the NOTIFY limit goes out without its payload.
$received = '';
my $big_id = $node->safe_psql('postgres',
	q{SELECT outbox.append('credits', 'evt.big.v1', jsonb_build_object('blob', repeat('x', 9000)))});
is($node->safe_psql('postgres', 'SELECT outbox.drain_once()'), '1', 'the large message is delivered');
is(wait_notifications(1), 1, 'its notification arrives');
@p = payloads();
like($p[0], qr/^\{"id": "$big_id", "type": "evt\.big\.v1", "truncated": true, "occurredAt": "[0-9T:.-]+Z"\}$/,
	'the notification is the envelope without payload, marked truncated');
is($node->safe_psql('postgres',
	"SELECT length(outbox.envelope_by_id('$big_id')->'payload'->>'blob')"),
	'9000', 'the listener can read the whole envelope by id');

# Batches: more messages than a batch, delivered in order over several rounds.
$received = '';
$node->safe_psql('postgres', q{
	SELECT outbox.append('credits', 'evt.seq.v1', jsonb_build_object('seq', g)) FROM generate_series(1, 7) g;
});
is($node->safe_psql('postgres', 'SET outbox.batch_size = 5; SELECT outbox.drain_once()'), '5', 'a drain delivers one batch');
is($node->safe_psql('postgres', 'SET outbox.batch_size = 5; SELECT outbox.drain_once()'), '2', 'the next round the rest');
is(wait_notifications(7), 7, 'seven notifications');
my @seq = map { /"seq": (\d+)/ ? $1 : () } payloads();
is("@seq", '1 2 3 4 5 6 7', 'delivered in append order');

# A topic without a route, and a topic given explicitly.
$node->safe_psql('postgres', q{SELECT outbox.append('unrouted', 'evt.x.v1', '{}')});
is($node->safe_psql('postgres', q{SELECT outbox.drain_once('unrouted')}), '0', 'an unrouted topic is not drained');
is($node->safe_psql('postgres', q{SELECT outbox.drain_once()}), '0', 'nor by a drain of all routes');

# A channel that cannot be notified (made by hand in the routes table) fails the
# message with the error, and the others of the batch go on.
$node->safe_psql('postgres', q{
	SELECT outbox.route_notify('other', 'other_events');
	UPDATE outbox.routes SET channel = repeat('c', 70) WHERE topic = 'other';
	SELECT outbox.append('other', 'evt.x.v1', '{"k": 1}');
});
is($node->safe_psql('postgres', q{SELECT outbox.drain_once('other')}), '0', 'nothing delivered to a bad channel');
is($node->safe_psql('postgres',
	q{SELECT attempts, leased_until IS NULL, available_at > now(), last_error LIKE '22023: channel name too long%' FROM outbox.message WHERE topic = 'other'}),
	'1|t|t|t', 'the message failed with the error and backs off');

$listener->quit;
$node->stop;
done_testing();
