// A JVM HTTP server and client (tests/rdma-programs/cases/java.sh): the
// JDK's own com.sun.net.httpserver and java.net.http.HttpClient, which open
// dual-stack AF_INET6 sockets and reach IPv4 through IPv4-mapped addresses.
//
//   java -cp DIR JavaHttp server PORT BYTES REQUESTS
//       serves /f (BYTES of pseudo-random data) on every address, prints
//       "sha256 HEX" of the body, exits after REQUESTS responses
//   java -cp DIR JavaHttp client HOST PORT REQUESTS
//       GETs /f REQUESTS times on one keep-alive connection, prints
//       "sha256 HEX" of each distinct body (one when all are equal), and
//       "ms N" (the time of all requests) on stderr
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.security.MessageDigest;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;

public class JavaHttp {
  static byte[] body(int size) {
    byte[] b = new byte[size];
    long x = 0x9E3779B97F4A7C15L;
    for (int i = 0; i < size; i++) {
      x ^= x << 13;
      x ^= x >>> 7;
      x ^= x << 17;
      b[i] = (byte) x;
    }
    return b;
  }

  static String sha(byte[] b) throws Exception {
    StringBuilder s = new StringBuilder();
    for (byte v : MessageDigest.getInstance("SHA-256").digest(b)) s.append(String.format("%02x", v));
    return s.toString();
  }

  public static void main(String[] a) throws Exception {
    if (a[0].equals("server")) {
      int port = Integer.parseInt(a[1]);
      byte[] b = body(Integer.parseInt(a[2]));
      CountDownLatch done = new CountDownLatch(Integer.parseInt(a[3]));
      HttpServer s = HttpServer.create(new InetSocketAddress(port), 16);
      s.createContext("/f", ex -> {
        ex.sendResponseHeaders(200, b.length);
        try (OutputStream o = ex.getResponseBody()) {
          o.write(b);
        }
        done.countDown();
      });
      s.start();
      System.out.println("sha256 " + sha(b));
      System.out.flush();
      done.await();
      Thread.sleep(300);
      s.stop(0);
      return;
    }
    HttpClient c = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    URI u = URI.create("http://" + a[1] + ":" + a[2] + "/f");
    int n = Integer.parseInt(a[3]);
    TreeSet<String> shas = new TreeSet<>();
    long t0 = System.nanoTime();
    for (int i = 0; i < n; i++) {
      HttpResponse<byte[]> r = c.send(HttpRequest.newBuilder(u).build(), HttpResponse.BodyHandlers.ofByteArray());
      if (r.statusCode() != 200) throw new RuntimeException("status " + r.statusCode());
      shas.add(sha(r.body()));
    }
    long ms = (System.nanoTime() - t0) / 1000000;
    System.out.println("sha256 " + String.join(",", shas));
    System.err.println("ms " + ms);
  }
}
