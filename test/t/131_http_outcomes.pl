# What an HTTP route does with each answer.  A redirect is a failure that
# backs off and is never followed; 410 Gone stops the route (paused for
# ever, the message released untried) until the route is set again; 408,
# 429 and 5xx back off, for as long as Retry-After says (seconds or an HTTP
# date) when it says, but never longer than outbox.backoff_max_seconds, and
# the retry carries the same webhook-id; any other 4xx kills the message at
# once, last_error quoting the first kilobyte of the answer; no answer at
# all is unreachable and counts for the route's breaker.  The worker and
# drain_once follow the same rules.  Times are measured against the
# arrival times the receiver recorded.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use OutboxHttp;

my $rx = OutboxHttp->start;
my $node = http_node('outcomes', 'app', "outbox.backoff_seconds = 5\noutbox.backoff_max_seconds = 40\n");

# a 400 answer of 5120 bytes that begins with something to read
my $bad_body = 'invalid payload: field "amount" must be positive; '
  . join('', map { sprintf('[%04d]', $_) } 1 .. 1000);
$bad_body = substr($bad_body, 0, 5120);
$rx->behave(
	'/moved' => { redirect => '/target' },
	'/gone' => { status => 410 },
	'/busy' => { status => 429, retry_after => '7', first => 1 },
	'/later' => { status => 503, retry_after_date => 12, first => 1 },
	'/capped' => { status => 503, retry_after => '3600' },
	'/timeout' => { status => 408 },
	'/flaky' => { status => 500, body => 'try again', first => 1 },
	'/bad' => { status => 400, body => $bad_body });
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
my %url = map { $_ => $rx->url("/$_") } qw(moved gone busy later capped timeout flaky bad);
$url{closed} = "http://127.0.0.1:$closed_port/closed";
$node->safe_psql('app', join(";\n", map { route_http($_, $url{$_}) } sort keys %url));

# one message per topic, two for gone, all committed together
my %id;
my $n = 0;
$id{$_} = sprintf('0190a5a0-0000-7000-8000-%012d', ++$n) for sort keys %url;
my $gone2 = sprintf('0190a5a0-0000-7000-8000-%012d', 99);
$node->safe_psql('app', 'BEGIN; '
	  . join('', map { "SELECT outbox.append('$_', 'evt.x.v1', '{}', '$id{$_}'); " } sort keys %url)
	  . "SELECT outbox.append('gone', 'evt.x.v1', '{}', '$gone2'); COMMIT");

# The row of a message: attempts|dead|delivered|leased|last_error.
sub row
{
	my ($id) = @_;
	return $node->safe_psql('app', qq{
		SELECT attempts, dead_at IS NOT NULL, delivered_at IS NOT NULL, leased_until IS NOT NULL, coalesce(last_error, '')
		  FROM outbox.message WHERE id = '$id'});
}

# The first attempts, all recorded before the earliest retry (5 s on):
# per topic, attempts|dead|delivered and the seconds from the first
# arrival at the receiver to available_at.
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE attempts >= 1 AND leased_until IS NULL},
		scalar(keys %url) - 1, 15),
	'every message but those of gone was tried once');
my %first;
for my $line (split /\n/, $node->safe_psql('app', q{
	SELECT topic, attempts, dead_at IS NOT NULL, delivered_at IS NOT NULL, extract(epoch FROM available_at)
	  FROM outbox.message WHERE topic <> 'gone'}))
{
	my ($topic, $attempts, $dead, $delivered, $available) = split /\|/, $line;
	my ($req) = $rx->requests("/$topic");
	$first{$topic} = { state => "$attempts|$dead|$delivered", delay => $req ? $available - $req->{time} : -1 };
}

# 1. 400 with a body: dead at once, last_error quotes the first kilobyte.
ok(wait_for($node, 'app', "SELECT dead_at IS NOT NULL FROM outbox.message WHERE id = '$id{bad}'", 't', 15),
	'400: the message is dead');
is(row($id{bad}), "1|t|f|f|38000: HTTP 400 from $url{bad}: " . substr($bad_body, 0, 1024),
	'after one attempt, last_error "38000: HTTP 400 from <url>: " and the first 1024 bytes of the 5120-byte body');
is(scalar $rx->requests('/bad'), 1, 'one call only');

# 2. 302: a failure that backs off; the Location is never visited.
is($first{moved}{state}, '1|f|f', '302: a failure, neither dead nor delivered');
my $d = $first{moved}{delay};
ok($d > 4 && $d < 6.5, sprintf('it backs off outbox.backoff_seconds (5 s): available %.2f s after the call', $d));
like((split /\|/, row($id{moved}), 5)[4], qr/\b302\b/, 'last_error names the status');
ok(wait_for($node, 'app', "SELECT attempts FROM outbox.message WHERE id = '$id{moved}'", '2', 15),
	'the retry is redirected too');
is(scalar $rx->requests('/target'), 0, 'the Location target was never requested');
is($node->safe_psql('app', q{SELECT consecutive_failures, paused_until IS NULL FROM outbox.routes WHERE topic = 'moved'}),
	'0|t', 'an answer, even a redirect, does not count for the breaker');

# 3. 410: the route stops; the message is released untried.
ok(wait_for($node, 'app', q{SELECT paused_until = 'infinity' FROM outbox.routes WHERE topic = 'gone'}, 't', 15),
	'410: the route is paused for ever');
like($node->safe_psql('app', q{SELECT last_failure FROM outbox.routes WHERE topic = 'gone'}), qr/endpoint answered 410 Gone/,
	'last_failure says why');
ok(wait_for($node, 'app', "SELECT leased_until IS NULL FROM outbox.message WHERE id = '$id{gone}'", 't', 5),
	'the message is released');
is(row($id{gone}) =~ s/\|[^|]*$//r, '0|f|f|f', 'with no attempt counted, not dead, not delivered');
is(row($gone2) =~ s/\|[^|]*$//r, '0|f|f|f', 'and the next message was not tried');
is($node->safe_psql('app', q{SELECT outbox.drain_once('gone')}), '0', 'drain_once does not call a stopped route');
is(scalar $rx->requests('/gone'), 1, 'the endpoint was called once');
$rx->behave('/gone' => { status => 200 });
$node->safe_psql('app', route_http('gone', $url{gone}));
is($node->safe_psql('app', q{SELECT paused_until IS NULL, consecutive_failures FROM outbox.routes WHERE topic = 'gone'}),
	't|0', 'setting the route again resumes it');
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE topic = 'gone' AND delivered_at IS NOT NULL}, '2', 15),
	'and its messages are delivered');
is(join(' ', map { $_->{headers}{'webhook-id'} } $rx->requests('/gone')), "$id{gone} $id{gone} $gone2",
	'in order, the released one first');

# 4. 429 with Retry-After: 7, then 200 with the same webhook-id.
is($first{busy}{state}, '1|f|f', '429: one attempt, not dead, not delivered');
$d = $first{busy}{delay};
ok($d > 6 && $d < 8.5, sprintf('Retry-After: 7 replaces the backoff: available %.2f s after the call', $d));
ok(wait_for($node, 'app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id{busy}'", 't', 15),
	'then it is delivered');
my @busy = $rx->requests('/busy');
is(join(' ', map { "$_->{answer}{status}:$_->{headers}{'webhook-id'}" } @busy), "429:$id{busy} 200:$id{busy}",
	'by a second call with the same webhook-id');
ok($busy[1]{time} - $busy[0]{time} > 6.5, sprintf('made %.2f s after the first', $busy[1]{time} - $busy[0]{time}));

# 5. Retry-After as an HTTP date 12 s ahead (whole seconds: 11 to 12 s).
is($first{later}{state}, '1|f|f', '503 with a date: one attempt');
$d = $first{later}{delay};
ok($d > 10 && $d < 13.5, sprintf('available at the date: %.2f s after the call', $d));

# 6. Retry-After: 3600, capped at outbox.backoff_max_seconds (40).
is($first{capped}{state}, '1|f|f', '503, Retry-After: 3600: one attempt');
$d = $first{capped}{delay};
ok($d > 38 && $d < 42.5, sprintf('capped at 40 s: available %.2f s after the call', $d));

# 7. 408 without Retry-After: the usual backoff.
is($first{timeout}{state}, '1|f|f', '408: one attempt, not dead');
$d = $first{timeout}{delay};
ok($d > 4 && $d < 6.5, sprintf('backs off 5 s: available %.2f s after the call', $d));

# 8. 500 then 200: delivered on a retry with the same webhook-id.
ok(wait_for($node, 'app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id{flaky}'", 't', 20),
	'500 then 200: delivered');
my @flaky = $rx->requests('/flaky');
is(join(' ', map { "$_->{answer}{status}:$_->{headers}{'webhook-id'}" } @flaky), "500:$id{flaky} 200:$id{flaky}",
	'on the retry, with the same webhook-id');
is($flaky[0]{body_bytes}, $flaky[1]{body_bytes}, 'and the same body');
cmp_ok($flaky[1]{headers}{'webhook-timestamp'}, '>', $flaky[0]{headers}{'webhook-timestamp'},
	'signed at the time of each attempt');

# 9. No answer (nothing listens): unreachable, counted by the breaker.
is($first{closed}{state}, '1|f|f', 'a closed port: the call failed, the message waits for a retry');
like($node->safe_psql('app', q{SELECT last_failure FROM outbox.routes WHERE topic = 'closed'}), qr/\S/,
	'the route records the failure');
cmp_ok($node->safe_psql('app', q{SELECT consecutive_failures FROM outbox.routes WHERE topic = 'closed'}), '>=', 1,
	'and counts it for its breaker');

# 10. The counters, per class of answer.
ok(wait_for($node, 'app', q{
	SELECT string_agg(topic || ':' || calls_2xx || '/' || calls_3xx || '/' || calls_4xx || '/' || calls_5xx || '/'
	                  || calls_failed || '/' || coalesce(last_status, 0), ' ' ORDER BY topic)
	  FROM outbox.route_http_stats WHERE topic IN ('bad', 'busy', 'flaky', 'later')},
	'bad:0/0/1/0/0/400 busy:1/0/1/0/0/200 flaky:1/0/0/1/0/200 later:1/0/0/1/0/200', 30),
	'route_http_stats counts 2xx, 3xx, 4xx, 5xx and no answer apart');

# 11. drain_once, in a database no worker serves: the same rules.
$rx->behave('/d-ok' => {}, '/d-bad' => { status => 422, body => 'unprocessable' }, '/d-gone' => { status => 410 });
$node->safe_psql('postgres', join(";\n", map { route_http("d$_", $rx->url("/d-$_")) } qw(ok bad gone)));
$node->safe_psql('postgres', q{SELECT outbox.append('d' || t, 'evt.x.v1', '{}') FROM unnest('{ok,bad,gone}'::text[]) t});
is($node->safe_psql('postgres', 'SELECT outbox.drain_once()'), '1', 'drain_once delivers one message of three');
is($node->safe_psql('postgres', q{
	SELECT string_agg(topic || ':' || attempts || '/' || (delivered_at IS NOT NULL) || '/' || (dead_at IS NOT NULL), ' ' ORDER BY topic)
	  FROM outbox.message}),
	'dbad:1/false/true dgone:0/false/false dok:1/true/false', '422 kills its message, 410 releases its own untried');
is($node->safe_psql('postgres', q{SELECT last_error FROM outbox.message WHERE topic = 'dbad'}),
	'38000: HTTP 422 from ' . $rx->url('/d-bad') . ': unprocessable', 'last_error of the 422');
is($node->safe_psql('postgres', q{SELECT paused_until FROM outbox.routes WHERE topic = 'dgone'}), 'infinity',
	'and the route of the 410 is stopped');

$node->stop;
done_testing();
