# The receivers' code of docs/http.md works: its Node.js and Python blocks
# run as they are printed (each says true for its example request and false
# for a changed one), and the verify() each defines accepts a request that
# the worker really sent, and refuses it with its body changed, with
# another secret, or once its timestamp is too old.
use strict;
use warnings;
use JSON::PP;
use MIME::Base64 qw(decode_base64);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use OutboxHttp;

# The fenced blocks of a language in the page, in order.
sub blocks
{
	my ($file, $lang) = @_;
	my $text = slurp_file($file);
	my @blocks = $text =~ /^```\Q$lang\E\n(.*?)^```$/msg;
	return @blocks;
}

my $page = "$FindBin::RealBin/../../docs/http.md";
my ($js) = blocks($page, 'js');
my ($py) = blocks($page, 'python');
ok(defined $js && $js =~ /function verify\(/, 'docs/http.md has a Node.js verify()');
ok(defined $py && $py =~ /def verify\(/, 'docs/http.md has a Python verify()');

my $dir = PostgreSQL::Test::Utils::tempdir;

# Run a block with code appended; returns its output lines.
sub run_block
{
	my ($interp, $code, %env) = @_;
	my $file = "$dir/block." . ($interp eq 'node' ? 'js' : 'py');
	open my $fh, '>', $file or die "$file: $!";
	print $fh $code;
	close $fh;
	local @ENV{ keys %env } = values %env;
	my ($stdout, $stderr);
	my $ok = IPC::Run::run([ $interp, $file ], '>', \$stdout, '2>', \$stderr);
	diag("$interp: $stderr") if !$ok || $stderr ne '';
	return split /\n/, $stdout // '';
}

# 1. As printed: the example request verifies, the changed one does not.
is_deeply([ run_block('node', $js) ], [ 'true', 'false' ], 'the Node.js block prints true, then false');
is_deeply([ run_block('python3', $py) ], [ 'True', 'False' ], 'the Python block prints True, then False');

# 2. A request the worker sent, verified by the code of the page.
my $secret = random_secret(32);
my $rx = OutboxHttp->start(secrets => [$secret]);
my $node = http_node('docs', 'app');
$node->safe_psql('app', route_http('docs', $rx->url('/in'), secret => $secret));
$node->safe_psql('app', q{SELECT outbox.append('docs', 'evt.docs.v1', '{"amount": "12.50", "note": "é ☃"}')});
my ($req) = $rx->wait_requests('/in', 1);
ok($req, 'the worker sent the request');
my $body = decode_base64($req->{body_b64});
my %h = %{ $req->{headers} };
my %sent = map { $_ => $h{$_} } qw(webhook-id webhook-timestamp webhook-signature);
my $headers = JSON::PP->new->canonical->encode(\%sent);
my $ts = $h{'webhook-timestamp'};

my $js_check = $js . q{
const __h = JSON.parse(process.env.H);
const __b = Buffer.from(process.env.B64, "base64");
const __now = Number(process.env.NOW);
console.log(verify(process.env.S, __h, __b, __now));
console.log(verify(process.env.S, __h, Buffer.concat([__b, Buffer.from(" ")]), __now));
console.log(verify(process.env.OTHER, __h, __b, __now));
console.log(verify(process.env.S, __h, __b, __now + 301));
};
my $py_check = $py . q{
import json as __json, os as __os
__h = __json.loads(__os.environ["H"])
__b = base64.b64decode(__os.environ["B64"])
__now = int(__os.environ["NOW"])
print(verify(__os.environ["S"], __h, __b, now=__now))
print(verify(__os.environ["S"], __h, __b + b" ", now=__now))
print(verify(__os.environ["OTHER"], __h, __b, now=__now))
print(verify(__os.environ["S"], __h, __b, now=__now + 301))
};
my %env = (H => $headers, B64 => $req->{body_b64}, NOW => $ts, S => $secret, OTHER => random_secret(32));
my @node_out = run_block('node', $js_check, %env);
my @py_out = run_block('python3', $py_check, %env);
is_deeply([ @node_out[2 .. 5] ], [ 'true', 'false', 'false', 'false' ],
	'Node.js: the sent request verifies; not with its body changed, another secret, or 5 minutes later');
is_deeply([ @py_out[2 .. 5] ], [ 'True', 'False', 'False', 'False' ],
	'Python: the same');

$rx->stop;
$node->stop;
done_testing();
