# HTTP routes deliver webhooks: each message appended on a routed topic is
# POSTed once by the worker, its body the envelope exactly as a remote
# route sends it, with the headers of the Standard Webhooks specification,
# the route's own headers and a signature that a receiver with its own
# implementation of the specification verifies.  While a secret is being
# rotated both signatures are sent, so that a receiver knowing only the old
# or only the new secret accepts the message; a route without a secret
# sends no signature.  outbox.webhook_signature gives the published test
# vector.  Over TLS, a route with ca_file trusts the test's own
# certificate authority; without it the certificate is refused and the
# call is unreachable.
use strict;
use warnings;
use MIME::Base64 qw(decode_base64);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use OutboxHttp;

my $old = random_secret(32);
my $new = random_secret(64);
my $rx = OutboxHttp->start(secrets => [$old]);
my $node = http_node('http', 'app', "outbox.backoff_seconds = 1\n");
my $su = $node->safe_psql('app', 'SELECT current_user');

# 1. The published test vector of the Standard Webhooks specification (the
# receiver's implementation gives it too: test/http/selftest.sh).
my $vector = q{SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
	'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}')};
is($node->safe_psql('app', $vector), 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
	'webhook_signature gives the test vector');
is(webhook_sign('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}'),
	'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=', 'and so does the receiver\'s implementation');
my $body = '{"é": "ü ☃", "n": [1, 2.50, null]}';
is($node->safe_psql('app', 'SELECT outbox.webhook_signature(' . join(', ', lit($new), lit('0190a5a0-0000-7000-8000-00000000abcd'), 1700000000, lit($body)) . ')'),
	webhook_sign($new, '0190a5a0-0000-7000-8000-00000000abcd', 1700000000, $body),
	'both agree on a 64-byte key and a body that is not ASCII');

# 2. A route with a secret and headers of its own.
$node->safe_psql('app', route_http('orders', $rx->url('/orders'), secret => $old,
	headers => '{"Authorization": "Bearer t0ken", "X-Tenant": "acme"}'));
is($node->safe_psql('app', q{
	SELECT target, url, channel IS NULL AND server IS NULL AND command IS NULL, ca_file IS NULL, secret_fingerprint, created_by
	  FROM outbox.routes WHERE topic = 'orders'}),
	'http|' . $rx->url('/orders') . '|t|t|' . secret_fingerprint($old) . "|$su",
	'the route is stored with the fingerprint of its secret, not the secret');
is($node->safe_psql('app', "SELECT count(*) FROM outbox.routes r WHERE r::text LIKE " . lit('%' . substr($old, 6, 12) . '%')),
	'0', 'the secret shows nowhere in outbox.routes');

my @ids = map { sprintf('0190a5a0-0000-7000-8000-0000000001%02d', $_) } 1 .. 4;
$node->safe_psql('app', 'BEGIN; '
	  . join('', map { "SELECT outbox.append('orders', 'order.placed.v1', " . lit(qq({"n": $_, "note": "a\\"b"})) . ", '$ids[$_ - 1]'); " } 1 .. 3)
	  . 'COMMIT');
$node->safe_psql('app', "SELECT outbox.append('orders', 'order.placed.v1', " . lit($body) . ", '$ids[3]')");
my @got = $rx->wait_requests('/orders', 4);
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE topic = 'orders' AND delivered_at IS NOT NULL}, '4', 10),
	'the four messages are delivered');
@got = $rx->requests('/orders');
is(join(' ', map { $_->{headers}{'webhook-id'} } @got), join(' ', @ids), 'each arrived once, in order, its id in webhook-id');
for my $i (0 .. 3)
{
	my $r = $got[$i];
	my $id = $ids[$i];
	my $envelope = $node->safe_psql('app', "SELECT outbox.envelope_by_id('$id')::text");
	is($r->{body_bytes}, $envelope, "message $i: the body is the envelope");
	is(join('|', $r->{method}, $r->{headers}{'content-type'}, $r->{headers}{'user-agent'},
			$r->{headers}{authorization}, $r->{headers}{'x-tenant'}),
		'POST|application/json|krizaka_outbox/1.5|Bearer t0ken|acme', "message $i: method and headers");
	my $ts = $r->{headers}{'webhook-timestamp'};
	like($ts, qr/^\d+$/, "message $i: webhook-timestamp is in Unix seconds");
	cmp_ok(abs($r->{timestamp_skew}), '<', 3, "message $i: and within a few seconds of its arrival ($r->{timestamp_skew} s)");
	is(join('|', $r->{signature}, @{ $r->{verified_by} }, scalar @{ $r->{signatures} }), 'valid|0|1',
		"message $i: one signature, verified by the receiver");
	is($r->{signatures}[0], webhook_sign($old, $id, $ts, $r->{body_bytes}), "message $i: exactly the specification's");
	is($node->safe_psql('app', 'SELECT outbox.webhook_signature(' . join(', ', lit($old), lit($id), $ts, lit($envelope)) . ')'),
		$r->{signatures}[0], "message $i: and webhook_signature's");
}

# 3. Rotation: the new secret signs first, the old one second; a receiver
# knowing either one accepts.
$node->safe_psql('app', 'SELECT outbox.rotate_http_secret(' . lit('orders') . ', ' . lit($new) . ')');
is($node->safe_psql('app', q{SELECT secret_fingerprint FROM outbox.routes WHERE topic = 'orders'}),
	secret_fingerprint($new), 'the fingerprint is the new secret\'s');
is($node->safe_psql('app', q{
	SELECT secret = } . lit($new) . q{, previous_secret = } . lit($old) . q{,
	       previous_until BETWEEN now() + interval '24 hours' - interval '1 minute' AND now() + interval '24 hours'
	  FROM outbox.route_secrets WHERE topic = 'orders'}),
	't|t|t', 'route_secrets keeps the old secret for 24 hours');
$rx->secrets($old, $new);
my $rid = '0190a5a0-0000-7000-8000-000000000201';
$node->safe_psql('app', "SELECT outbox.append('orders', 'order.placed.v1', '{\"rotated\": true}', '$rid')");
my ($r) = $rx->wait_requests('/orders', 5);
$r = ($rx->requests_for('/orders', $rid))[0];
my $ts = $r->{headers}{'webhook-timestamp'};
is(join(' ', @{ $r->{signatures} }),
	join(' ', webhook_sign($new, $rid, $ts, $r->{body_bytes}), webhook_sign($old, $rid, $ts, $r->{body_bytes})),
	'two signatures, the new secret\'s first, space-separated');
is(join(',', @{ $r->{verified_by} }), '0,1', 'a receiver knowing only the old secret verifies it, and one knowing only the new');
$rx->secrets($new);
$rid = '0190a5a0-0000-7000-8000-000000000202';
$node->safe_psql('app', "SELECT outbox.append('orders', 'order.placed.v1', '{}', '$rid')");
$rx->wait_requests('/orders', 6);
($r) = $rx->requests_for('/orders', $rid);
is($r->{signature}, 'valid', 'a receiver that knows only the new secret accepts');

# once keep_old_for has passed, only the new secret signs
$node->safe_psql('app', q{UPDATE outbox.route_secrets SET previous_until = now() - interval '1 second' WHERE topic = 'orders'});
$rx->secrets($old, $new);
$rid = '0190a5a0-0000-7000-8000-000000000203';
$node->safe_psql('app', "SELECT outbox.append('orders', 'order.placed.v1', '{}', '$rid')");
$rx->wait_requests('/orders', 7);
($r) = $rx->requests_for('/orders', $rid);
is(join('|', scalar @{ $r->{signatures} }, @{ $r->{verified_by} }), '1|1', 'after keep_old_for, one signature: the new secret\'s');

# 4. A route without a secret: no signature, the other headers as ever.
$node->safe_psql('app', route_http('plain', $rx->url('/plain')));
is($node->safe_psql('app', q{SELECT secret_fingerprint IS NULL FROM outbox.routes WHERE topic = 'plain'}), 't',
	'no fingerprint without a secret');
$rid = '0190a5a0-0000-7000-8000-000000000301';
$node->safe_psql('app', "SELECT outbox.append('plain', 'evt.plain.v1', '{}', '$rid')");
($r) = $rx->wait_requests('/plain', 1);
is(join('|', $r->{signature}, exists $r->{headers}{'webhook-signature'} ? 'header' : 'no header',
		$r->{headers}{'webhook-id'}, $r->{headers}{'webhook-timestamp'} =~ /^\d+$/ ? 'ts' : 'no ts'),
	"absent|no header|$rid|ts", 'no webhook-signature header; webhook-id and webhook-timestamp still sent');

# 5. TLS: the test's CA in ca_file verifies the receiver's certificate.
my $ca = make_ca();
my $tls = OutboxHttp->start(tls => $ca, secrets => [$old]);
$node->safe_psql('app', route_http('secure', $tls->url('/secure'), secret => $old, ca_file => "$ca/ca.pem"));
is($node->safe_psql('app', q{SELECT ca_file FROM outbox.routes WHERE topic = 'secure'}), "$ca/ca.pem", 'ca_file is stored');
$rid = '0190a5a0-0000-7000-8000-000000000401';
$node->safe_psql('app', "SELECT outbox.append('secure', 'evt.tls.v1', '{}', '$rid')");
($r) = $tls->wait_requests('/secure', 1);
is(join('|', $r->{tls} ? 'tls' : 'plain', $r->{headers}{'webhook-id'}, $r->{signature}), "tls|$rid|valid",
	'delivered over TLS with the CA of ca_file');
ok(wait_for($node, 'app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$rid'", 't', 10),
	'and recorded as delivered');

# without ca_file the system's store does not know the test's CA
$node->safe_psql('app', route_http('untrusted', $tls->url('/untrusted'), secret => $old));
$rid = '0190a5a0-0000-7000-8000-000000000402';
$node->safe_psql('app', "SELECT outbox.append('untrusted', 'evt.tls.v1', '{}', '$rid')");
# attempts counts from the claim, last_error from the call's end
ok(wait_for($node, 'app', "SELECT attempts >= 1 AND last_error IS NOT NULL FROM outbox.message WHERE id = '$rid'", 't', 10),
	'the call was made, and failed');
like($node->safe_psql('app', "SELECT last_error FROM outbox.message WHERE id = '$rid'"), qr/certificate/i,
	'it failed on the certificate');
is($node->safe_psql('app', "SELECT delivered_at IS NULL AND dead_at IS NULL FROM outbox.message WHERE id = '$rid'"), 't',
	'unreachable: the message waits for a retry, it is not dead');
cmp_ok($node->safe_psql('app', q{SELECT consecutive_failures FROM outbox.routes WHERE topic = 'untrusted'}), '>=', 1,
	'and the failure counts for the route\'s breaker');
like($node->safe_psql('app', q{SELECT last_failure FROM outbox.routes WHERE topic = 'untrusted'}), qr/certificate/i,
	'which says why');
is(scalar $tls->requests('/untrusted'), 0, 'the receiver never saw a request');
ok($tls->wait_event(sub { $_[0]{event} eq 'tls_error' }, 5), 'the handshake was refused');

# 6. The counters of the HTTP routes.
ok(wait_for($node, 'app', q{
	SELECT topic, calls_2xx, calls_3xx, calls_4xx, calls_5xx, last_status, latency_seconds_total > 0, last_call_at <= now()
	  FROM outbox.route_http_stats WHERE topic IN ('orders', 'plain', 'secure') ORDER BY topic},
	"orders|7|0|0|0|200|t|t\nplain|1|0|0|0|200|t|t\nsecure|1|0|0|0|200|t|t", 10), 'route_http_stats counts the calls');
cmp_ok($node->safe_psql('app', q{SELECT calls_failed FROM outbox.route_http_stats WHERE topic = 'untrusted'}), '>=', 1,
	'and the calls without an answer');

is(scalar $rx->requests, 8, 'the receiver saw nothing more than these');
$node->stop;
done_testing();
