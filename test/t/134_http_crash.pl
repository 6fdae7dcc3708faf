# HTTP routes are at least once across crashes.  The worker killed (-9)
# while its call hangs: the server restarts, the lease runs out and the
# message is delivered by the next worker, under the same webhook-id and
# with the same body.  The server stopped in immediate mode while a batch
# is being delivered, then started: every committed message reaches the
# receiver at least once, each under its own webhook-id, and all of them
# end up delivered.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use JSON::PP ();
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use OutboxHttp;

my $rx = OutboxHttp->start(paths => {
	'/crash' => { hang => JSON::PP::true, first => 1 },
	'/batch' => { delay_ms => 40 } });
my $node = http_node('crash', 'app', q{
restart_after_crash = on
outbox.lease_seconds = 10
outbox.http_timeout_ms = 60000
outbox.backoff_seconds = 1
});
$node->safe_psql('app', join(";\n", route_http('crash', $rx->url('/crash')), route_http('batch', $rx->url('/batch'))));

# 1. kill -9 of the worker while its call hangs.
my $id = '0190a5a0-0000-7000-8000-000000000001';
my $wpid = worker_pid($node, 'app');
$node->safe_psql('app', "SELECT outbox.append('crash', 'evt.x.v1', '{\"k\": 9}', '$id')");
my ($hung) = $rx->wait_requests('/crash', 1);
is($hung->{headers}{'webhook-id'}, $id, 'the call hangs');
is(kill('KILL', $wpid), 1, 'the worker is killed');
ok($rx->wait_event(sub { $_[0]{event} eq 'closed' && $_[0]{seq} == $hung->{seq} }, 10),
	'its connection went with it');
ok($node->poll_query_until('app', "SELECT count(*) = 1 FROM outbox.worker_status() WHERE datname = 'app' AND pid <> $wpid"),
	'the server restarted with a new worker');
my @calls = $rx->wait_requests('/crash', 2, 30);
ok(wait_for($node, 'app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id'", 't', 15),
	'the message is delivered after the lease');
@calls = $rx->requests('/crash');
is(join(' ', map { ($_->{answer}{hang} ? 'hang' : $_->{answer}{status}) . ":$_->{headers}{'webhook-id'}" } @calls),
	"hang:$id 200:$id", 'called again once, with the same webhook-id, and answered');
is($calls[1]{body_bytes}, $calls[0]{body_bytes}, 'with the same body');
is($calls[1]{body_bytes}, $node->safe_psql('app', "SELECT outbox.envelope_by_id('$id')::text"), 'the envelope');

# 2. Immediate stop in the middle of a batch, then start: nothing lost.
my @ids = map { sprintf('0190a5a0-0000-7000-8000-%012d', 1000 + $_) } 1 .. 60;
for my $k (0 .. 5)
{
	$node->safe_psql('app', 'BEGIN; '
		  . join('', map { "SELECT outbox.append('batch', 'evt.x.v1', '{\"n\": $_}', '$ids[$_]'); " } $k * 10 .. $k * 10 + 9)
		  . 'COMMIT');
}
my @before = $rx->wait_requests('/batch', 5);
ok(@before, 'the batch is being delivered');
$node->stop('immediate');
my $at_stop = scalar $rx->requests('/batch');
cmp_ok($at_stop, '<', 60, "stopped with $at_stop of 60 calls made");
$node->start;
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE topic = 'batch' AND delivered_at IS NOT NULL}, '60', 60),
	'after the restart every message is delivered');
my %seen;
$seen{ $_->{headers}{'webhook-id'} }++ for $rx->requests('/batch');
is(join(',', grep { !$seen{$_} } @ids), '', 'every committed message reached the receiver');
is(scalar(keys %seen), 60, 'under its own webhook-id, and no other');
my $again = grep { $_ > 1 } values %seen;
diag("$again messages were received twice or more (the calls of the interrupted batch)");
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE dead_at IS NOT NULL OR attempts > 2}), '0',
	'none died, none needed more than a second attempt');

$node->stop;
done_testing();
