# OutboxHttp: the HTTP receiver (test/http/receiver.py) and the TLS
# certificates (test/http/make-ca.sh) of the TAP tests of HTTP routes.
#
#     use OutboxHttp;
#     my $r = OutboxHttp->start(secrets => [$secret]);
#     $r->behave('/hook' => { status => 503, retry_after => '7' });
#     ... route_http(topic, $r->url('/hook'), ...) ...
#     my @req = $r->wait_requests('/hook', 1);
#
# A receiver runs as a child process (python3, the standard library only)
# until stop() or the end of the test.  What it answers per path, and the
# secrets it verifies signatures with, are in its control file, which
# behave() and secrets() rewrite; its log is read afresh by each call.
package OutboxHttp;

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run;
use JSON::PP;
use MIME::Base64 qw(decode_base64 encode_base64);
use Digest::SHA qw(sha256_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxTest;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(http_node route_http make_ca random_secret secret_fingerprint webhook_sign PYTHON);

use constant PYTHON => '/usr/bin/python3';
my $HTTP_DIR = File::Spec->rel2abs(dirname(__FILE__) . '/../http');
my @running;
my $json = JSON::PP->new->utf8->canonical;

# Start a receiver.  Options: secrets => [whsec_...], paths => {path =>
# behaviour} (see receiver.py), default => behaviour, tls => a directory
# made by make_ca (it then serves HTTPS with that server certificate).
sub start
{
	my ($class, %opt) = @_;
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('receiver'));
	my $self = bless {
		dir => $dir,
		log => "$dir/requests.jsonl",
		control => "$dir/control.json",
		paths => $opt{paths} // {},
		default => $opt{default} // {},
		secrets => $opt{secrets} // [],
		scheme => $opt{tls} ? 'https' : 'http',
	}, $class;
	$self->_write_control;
	my @cmd = (PYTHON, "$HTTP_DIR/receiver.py", '--log', $self->{log}, '--control', $self->{control});
	push @cmd, '--cert', "$opt{tls}/server.pem", '--key', "$opt{tls}/server.key" if $opt{tls};
	my ($out, $err) = ('', '');
	$self->{out} = \$out;
	$self->{err} = \$err;
	$self->{run} = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	my $until = time() + 30;
	while ($out !~ /^(\d+)\n/ && time() < $until && $self->{run}->pumpable)
	{
		$self->{run}->pump_nb;
		usleep(20_000);
	}
	die "the receiver did not start: $err" unless $out =~ /^(\d+)\n/;
	$self->{port} = $1;
	push @running, $self;
	return $self;
}

sub port { $_[0]{port} }

# The URL of a path of this receiver; host => 'localhost' names it.
sub url
{
	my ($self, $path, %opt) = @_;
	return sprintf('%s://%s:%d%s', $self->{scheme}, $opt{host} // '127.0.0.1', $self->{port}, $path // '/');
}

sub _write_control
{
	my ($self) = @_;
	my $tmp = "$self->{control}.tmp";
	open my $fh, '>', $tmp or die "$tmp: $!";
	print $fh $json->encode({ paths => $self->{paths}, default => $self->{default}, secrets => $self->{secrets} });
	close $fh or die "$tmp: $!";
	rename $tmp, $self->{control} or die "rename $tmp: $!";
	return;
}

# Set what paths answer: path => behaviour, ...
sub behave
{
	my ($self, %paths) = @_;
	$self->{paths}{$_} = $paths{$_} for keys %paths;
	$self->_write_control;
	return;
}

# Set the secrets signatures are verified with (indexes in verified_by).
sub secrets
{
	my ($self, @secrets) = @_;
	$self->{secrets} = [@secrets];
	$self->_write_control;
	return;
}

# Every event logged so far, in order (hash references).
sub events
{
	my ($self) = @_;
	open my $fh, '<', $self->{log} or return ();
	my @events;
	while (my $line = <$fh>)
	{
		last unless $line =~ /\n\z/;    # a line still being written
		push @events, $json->decode($line);
	}
	return @events;
}

# The requests to path (without its query string), or to any path; each
# with body_bytes, the body exactly as sent.
sub requests
{
	my ($self, $path) = @_;
	my @r = grep { $_->{event} eq 'request' && (!defined $path || ($_->{path} =~ s/\?.*//r) eq $path) } $self->events;
	$_->{body_bytes} = decode_base64($_->{body_b64}) for @r;
	return @r;
}

# The requests to path carrying webhook-id $id.
sub requests_for
{
	my ($self, $path, $id) = @_;
	return grep { ($_->{headers}{'webhook-id'} // '') eq $id } $self->requests($path);
}

# When the client of request $seq (a hung one) closed its connection, or
# undef.
sub closed_at
{
	my ($self, $seq) = @_;
	my ($e) = grep { $_->{event} eq 'closed' && $_->{seq} == $seq } $self->events;
	return $e ? $e->{time} : undef;
}

# Wait until path has had at least $n requests (up to $seconds, by default
# the harness's timeout); returns them, or the empty list after saying how
# many came.
sub wait_requests
{
	my ($self, $path, $n, $seconds) = @_;
	my $until = time() + ($seconds // $PostgreSQL::Test::Utils::timeout_default);
	my @r;
	while (1)
	{
		@r = $self->requests($path);
		return @r if @r >= $n;
		last if time() >= $until;
		usleep(20_000);
	}
	diag(sprintf('%s: %d requests of the %d awaited', $path, scalar @r, $n));
	return ();
}

# Wait until the log holds an event for which $test (a code reference on
# the event) is true; returns it, or undef at the timeout.
sub wait_event
{
	my ($self, $test, $seconds) = @_;
	my $until = time() + ($seconds // $PostgreSQL::Test::Utils::timeout_default);
	while (time() < $until)
	{
		for my $e ($self->events)
		{
			return $e if $test->($e);
		}
		usleep(20_000);
	}
	return undef;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{run};
	$self->{run}->kill_kill;
	delete $self->{run};
	return;
}

END
{
	local $?;    # the test's exit status, which reaping the children would change
	$_->stop for @running;
}

# A started cluster whose drain worker serves database $db (made here,
# with the extension) and whose HTTP routes may reach 127.0.0.1, where the
# receivers listen; $conf is added to postgresql.conf.  The extension is in
# database postgres too (no worker serves it: drain_once there, and
# worker_status()).  Returns once the worker of $db runs.
sub http_node
{
	my ($name, $db, $conf) = @_;
	my $node = worker_node($name, $db, "outbox.http_private_networks = '127.0.0.1/32'\n" . ($conf // ''));
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($_, 'CREATE EXTENSION krizaka_outbox') for $db, 'postgres';
	$node->poll_query_until('postgres',
		"SELECT count(*) FROM outbox.worker_status() WHERE datname = '$db' AND pid IS NOT NULL", '1')
	  or die "the worker of $db did not start";
	return $node;
}

# The SQL that makes an HTTP route: outbox.route_http(topic, url) and the
# named arguments in %opt (secret, headers, ca_file).
sub route_http
{
	my ($topic, $url, %opt) = @_;
	return 'SELECT outbox.route_http(' . join(', ', lit($topic), lit($url),
		map { "$_ => " . lit($opt{$_}) } sort keys %opt) . ')';
}

# A certificate authority and a server certificate it signed for 127.0.0.1
# and localhost, in a new temporary directory (ca.pem, server.pem,
# server.key), made by the openssl tool; returns the directory.
sub make_ca
{
	# absolute: the server reads ca_file from its data directory
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('ca'));
	system('sh', "$HTTP_DIR/make-ca.sh", $dir) == 0 or die "make-ca.sh failed";
	return $dir;
}

# A fresh webhook secret: whsec_ and the base64 of $bytes random bytes.
sub random_secret
{
	my ($bytes) = @_;
	my $key = join '', map { chr(int(rand(256))) } 1 .. ($bytes // 32);
	return 'whsec_' . encode_base64($key, '');
}

# What outbox.routes.secret_fingerprint shows for a secret: the first 16
# hex digits of the SHA-256 of its key.
sub secret_fingerprint
{
	my ($secret) = @_;
	return substr(sha256_hex(decode_base64($secret =~ s/^whsec_//r)), 0, 16);
}

# The signature of the receiver's own implementation (not the
# extension's): 'v1,<base64>'.
sub webhook_sign
{
	my ($secret, $id, $ts, $body) = @_;
	my ($out, $err);
	IPC::Run::run([ PYTHON, "$HTTP_DIR/receiver.py", 'sign', $secret, $id, $ts, $body ], '>', \$out, '2>', \$err)
	  or die "receiver.py sign: $err";
	chomp $out;
	return $out;
}

1;
