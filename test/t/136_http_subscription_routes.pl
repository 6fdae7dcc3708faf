# HTTP routes per subscription: one topic delivered by the worker to two
# receivers, its default subscription's route (made as in 1.4) and a named
# subscription's (route_http with a last argument subscription), each with
# its own secret and headers.  Each receiver gets every message once, in
# order, signed with its own route's secret; each route has its counters;
# rotating one route's secret and removing one route leave the other as it
# was.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use OutboxHttp;

my $s_default = random_secret(32);
my $s_search = random_secret(32);
my $s_new = random_secret(32);
my $rx = OutboxHttp->start(secrets => [ $s_default, $s_search, $s_new ]);
my $node = http_node('httpsub', 'app', "outbox.backoff_seconds = 1\n");

$node->safe_psql('app', route_http('orders', $rx->url('/default'), secret => $s_default));
$node->safe_psql('app', 'SELECT outbox.route_http(' . join(', ', lit('orders'), lit($rx->url('/search')),
	lit($s_search), lit('{"X-Subscription": "search"}'), 'NULL', lit('search')) . ')');
is($node->safe_psql('app', q{
	SELECT string_agg(coalesce(subscription, '(default)') || ' ' || target || ' ' || url, ', '
	                  ORDER BY subscription NULLS FIRST)
	  FROM outbox.routes WHERE topic = 'orders'}),
	'(default) http ' . $rx->url('/default') . ', search http ' . $rx->url('/search'),
	'topic orders has an HTTP route for each subscription');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.subscription WHERE topic = 'orders' AND name = 'search'}),
	'1', 'the named subscription was made with its route');
is($node->safe_psql('app', q{
	SELECT string_agg(coalesce(subscription, '(default)') || ' ' || (headers IS NOT NULL)::text, ', '
	                  ORDER BY subscription NULLS FIRST)
	  FROM outbox.route_secrets WHERE topic = 'orders'}),
	'(default) false, search true', 'each route keeps its own secrets and headers');

my @ids = map { sprintf('0190a5a0-0000-7000-8000-0000000002%02d', $_) } 1 .. 5;
$node->safe_psql('app', 'BEGIN; '
	  . join('', map { "SELECT outbox.append('orders', 'order.placed.v1', '{\"n\": $_}', '$ids[$_ - 1]'); " } 1 .. 5)
	  . 'COMMIT');
$rx->wait_requests('/default', 5);
$rx->wait_requests('/search', 5);
for my $path ('/default', '/search')
{
	my @got = $rx->requests($path);
	is(join(' ', map { $_->{headers}{'webhook-id'} } @got), join(' ', @ids),
		"$path received each message once, in order");
}
my $verified = sub {
	my ($path) = @_;
	return join(' ', map { join('|', $_->{signature}, @{ $_->{verified_by} }) } $rx->requests($path));
};
is($verified->('/default'), join(' ', ('valid|0') x 5), 'the default route signs with its secret only');
is($verified->('/search'), join(' ', ('valid|1') x 5), 'the named route signs with its own');
is(join(' ', map { $_->{headers}{'x-subscription'} // '-' } $rx->requests('/default')), join(' ', ('-') x 5),
	'the default route sends none of the named route\'s headers');
is(join(' ', map { $_->{headers}{'x-subscription'} // '-' } $rx->requests('/search')), join(' ', ('search') x 5),
	'the named route sends its headers');
ok(wait_for($node, 'app', q{
	SELECT string_agg(coalesce(subscription, '(default)') || ' ' || calls_2xx, ', ' ORDER BY subscription NULLS FIRST)
	  FROM outbox.route_http_stats WHERE topic = 'orders'}, '(default) 5, search 5', 10),
	'route_http_stats counts the calls of each route apart');

# rotating the named route's secret leaves the default route's as it was
my $fingerprints = q{
	SELECT string_agg(coalesce(subscription, '(default)') || ' ' || secret_fingerprint, ', ' ORDER BY subscription NULLS FIRST)
	  FROM outbox.routes WHERE topic = 'orders'};
my $before = $node->safe_psql('app', $fingerprints);
$node->safe_psql('app', 'SELECT outbox.rotate_http_secret(' . join(', ', lit('orders'), lit($s_new), lit('1 hour'), lit('search')) . ')');
is($node->safe_psql('app', $fingerprints),
	'(default) ' . secret_fingerprint($s_default) . ', search ' . secret_fingerprint($s_new),
	'rotate_http_secret with a subscription changes that route\'s secret only');
isnt($before, $node->safe_psql('app', $fingerprints), 'which it did');
my $id = $node->safe_psql('app', q{SELECT outbox.append('orders', 'order.placed.v1', '{"n": 6}')});
$rx->wait_requests('/search', 6);
$rx->wait_requests('/default', 6);
my ($last) = grep { $_->{headers}{'webhook-id'} eq $id } $rx->requests('/search');
is(join('|', @{ $last->{verified_by} }), '1|2', 'the named route signs with its new secret and its old one');
is($last->{signatures}[0],
	webhook_sign($s_new, $id, $last->{headers}{'webhook-timestamp'}, $last->{body_bytes}),
	'the new one first');
($last) = grep { $_->{headers}{'webhook-id'} eq $id } $rx->requests('/default');
is(join('|', @{ $last->{verified_by} }), '0', 'the default route with its own, as before');

my ($ret, $out, $err) = $node->psql('app', 'SELECT outbox.rotate_http_secret(' . join(', ', lit('orders'), lit($s_new), lit('1 hour'), lit('audit')) . ')');
like($err, qr/subscription "audit" of topic "orders" has no HTTP route/,
	'rotate_http_secret of a subscription without an HTTP route is refused');

# removing the named route takes its secrets along, not the default route's
$node->safe_psql('app', q{SELECT outbox.unroute('orders', 'search')});
is($node->safe_psql('app', q{
	SELECT string_agg(coalesce(subscription, '(default)'), ', ') FROM outbox.route_secrets WHERE topic = 'orders'}),
	'(default)', 'unroute of the named subscription drops its secrets only');
$id = $node->safe_psql('app', q{SELECT outbox.append('orders', 'order.placed.v1', '{"n": 7}')});
$rx->wait_requests('/default', 7);
is(scalar $rx->requests('/default'), 7, 'the default route still delivers');
is(scalar $rx->requests('/search'), 6, 'the removed route no more');

$node->stop;
$rx->stop;
done_testing();
