// TLS on both front ends with certificates made at test time (OpenSSL): HTTPS through
// cpp-httplib's SSL client verifying the server, gRPC over SSL credentials, and mutual TLS on
// both (a client without a certificate signed by the configured CA is refused).
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <httplib.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "kvserve/v1/kvserve.grpc.pb.h"
#include "tests/unit/server/test_server.h"

namespace kvserve::server::testing {
namespace {

struct KeyCert {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~KeyCert() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
};

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  ASSERT_NE(ext, nullptr) << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A P-256 key and a certificate for `cn`, signed by `issuer` (self-signed when null).
std::unique_ptr<KeyCert> Make(const char* cn, bool is_ca, const KeyCert* issuer, long serial) {
  auto kc = std::make_unique<KeyCert>();
  kc->key = EVP_EC_gen("P-256");
  kc->cert = X509_new();
  X509_set_version(kc->cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(kc->cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(kc->cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(kc->cert), 3600);
  X509_set_pubkey(kc->cert, kc->key);
  X509_NAME* name = X509_get_subject_name(kc->cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509* issuer_cert = issuer != nullptr ? issuer->cert : kc->cert;
  X509_set_issuer_name(kc->cert, X509_get_subject_name(issuer_cert));
  if (is_ca) {
    AddExtension(kc->cert, issuer_cert, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(kc->cert, issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(kc->cert, issuer_cert, NID_basic_constraints, "CA:FALSE");
    AddExtension(kc->cert, issuer_cert, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  }
  X509_sign(kc->cert, issuer != nullptr ? issuer->key : kc->key, EVP_sha256());
  return kc;
}

std::string CertPem(const KeyCert& kc) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, kc.cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  return pem;
}

std::string KeyPem(const KeyCert& kc) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, kc.key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  return pem;
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/kvserve_tls_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = Make("kvserve test CA", true, nullptr, 1);
    server_cert_ = Make("localhost", false, ca_.get(), 2);
    client_cert_ = Make("client", false, ca_.get(), 3);
    ca_path_ = Write("ca.pem", CertPem(*ca_));
    cert_path_ = Write("server.pem", CertPem(*server_cert_));
    key_path_ = Write("server.key", KeyPem(*server_cert_));
    client_cert_path_ = Write("client.pem", CertPem(*client_cert_));
    client_key_path_ = Write("client.key", KeyPem(*client_cert_));
  }
  void TearDown() override {
    for (const std::string& p : {ca_path_, cert_path_, key_path_, client_cert_path_, client_key_path_}) {
      std::remove(p.c_str());
    }
  }
  std::unique_ptr<TestServer> Start(bool mutual) {
    TestServerOptions o;
    o.tls_cert_path = cert_path_;
    o.tls_key_path = key_path_;
    if (mutual) o.tls_client_ca_path = ca_path_;
    return std::make_unique<TestServer>(std::move(o));
  }
  std::unique_ptr<v1::KvServe::Stub> Stub(const TestServer& s, bool with_client_cert) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = CertPem(*ca_);
    if (with_client_cert) {
      ssl.pem_private_key = KeyPem(*client_cert_);
      ssl.pem_cert_chain = CertPem(*client_cert_);
    }
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return v1::KvServe::NewStub(grpc::CreateCustomChannel(s.grpc_target(), grpc::SslCredentials(ssl), args));
  }
  static grpc::Status ListModels(v1::KvServe::Stub& stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListModelsResponse resp;
    return stub.ListModels(&ctx, v1::ListModelsRequest(), &resp);
  }

  std::unique_ptr<KeyCert> ca_, server_cert_, client_cert_;
  std::string ca_path_, cert_path_, key_path_, client_cert_path_, client_key_path_;
};

TEST_F(TlsTest, HttpsServesVerifiedClientsAndRefusesPlainHttp) {
  auto server = Start(/*mutual=*/false);
  httplib::SSLClient tls("127.0.0.1", server->http_port());
  tls.set_ca_cert_path(ca_path_.c_str());
  tls.enable_server_certificate_verification(true);
  auto res = tls.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 4, "temperature": 0})",
                      "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->body.find("text_completion"), std::string::npos);

  httplib::Client plain("127.0.0.1", server->http_port());
  plain.set_read_timeout(5, 0);
  auto refused = plain.Get("/health");
  EXPECT_TRUE(!refused || refused->status != 200) << "plain HTTP must not be served on the TLS port";
}

TEST_F(TlsTest, HttpsClientThatHangsUpMidStreamIsAborted) {
  auto server = Start(/*mutual=*/false);
  server->engine().SetPaused(true);  // only the role chunk goes out; then only the socket tells
  httplib::SSLClient tls("127.0.0.1", server->http_port());
  tls.set_ca_cert_path(ca_path_.c_str());
  tls.enable_server_certificate_verification(true);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 50, "stream": true})";
  req.set_header("Content-Type", "application/json");
  // Returning false makes the client drop the connection at the first chunk.
  req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };
  auto res = tls.send(req);
  EXPECT_FALSE(res);  // canceled by the receiver
  tls.stop();
  ASSERT_TRUE(server->engine().WaitForSubmitted(1, std::chrono::milliseconds(10000)));
  const std::string id = server->engine().submitted()[0].request_id;
  // Well within the 15 s SSE keep-alive: the hang-up is seen on the socket, not by a write.
  EXPECT_TRUE(server->engine().WaitForAbort(id, std::chrono::milliseconds(5000)).has_value());
}

TEST_F(TlsTest, HttpsMutualTlsNeedsAClientCertificate) {
  auto server = Start(/*mutual=*/true);
  constexpr char kBody[] = R"({"prompt": "x", "max_tokens": 2, "temperature": 0})";
  httplib::SSLClient with_cert("127.0.0.1", server->http_port(), client_cert_path_, client_key_path_);
  with_cert.set_ca_cert_path(ca_path_.c_str());
  with_cert.enable_server_certificate_verification(true);
  auto res = with_cert.Post("/v1/completions", kBody, "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;

  // No certificate: the handshake fails, so there is no HTTP response at all.
  httplib::SSLClient without_cert("127.0.0.1", server->http_port());
  without_cert.set_ca_cert_path(ca_path_.c_str());
  without_cert.enable_server_certificate_verification(true);
  without_cert.set_read_timeout(5, 0);
  auto refused = without_cert.Post("/v1/completions", kBody, "application/json");
  EXPECT_FALSE(refused) << "served without a client certificate: " << refused->status;

  // A certificate from another CA is refused too.
  auto other_ca = Make("other CA", true, nullptr, 10);
  auto stranger = Make("stranger", false, other_ca.get(), 11);
  const std::string stranger_cert = Write("stranger.pem", CertPem(*stranger));
  const std::string stranger_key = Write("stranger.key", KeyPem(*stranger));
  httplib::SSLClient foreign("127.0.0.1", server->http_port(), stranger_cert, stranger_key);
  foreign.set_ca_cert_path(ca_path_.c_str());
  foreign.enable_server_certificate_verification(true);
  foreign.set_read_timeout(5, 0);
  auto foreign_res = foreign.Post("/v1/completions", kBody, "application/json");
  EXPECT_FALSE(foreign_res) << "served a certificate the CA did not sign: " << foreign_res->status;
  std::remove(stranger_cert.c_str());
  std::remove(stranger_key.c_str());
}

TEST_F(TlsTest, GrpcOverTls) {
  auto server = Start(/*mutual=*/false);
  EXPECT_TRUE(ListModels(*Stub(*server, /*with_client_cert=*/false)).ok());
  auto insecure = v1::KvServe::NewStub(
      grpc::CreateChannel(server->grpc_target(), grpc::InsecureChannelCredentials()));
  EXPECT_FALSE(ListModels(*insecure).ok());
}

TEST_F(TlsTest, GrpcMutualTlsNeedsAClientCertificate) {
  auto server = Start(/*mutual=*/true);
  EXPECT_TRUE(ListModels(*Stub(*server, /*with_client_cert=*/true)).ok());
  EXPECT_FALSE(ListModels(*Stub(*server, /*with_client_cert=*/false)).ok());
}

}  // namespace
}  // namespace kvserve::server::testing
