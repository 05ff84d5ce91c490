package dev.psisdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import dev.psisdk.testing.PsiServer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The SDK as a Java caller sees it: CompletableFuture, builders, checked causes. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class JavaApiTest {
    private static PsiServer server;

    @BeforeAll
    static void start() {
        server = new PsiServer(TestData.REGISTRY);
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    @Test
    void matchAsyncCompletesWithTheMatchesAndReportsProgress() throws Exception {
        DiscoveryConfig config = new DiscoveryConfig().withProtocol(Protocol.OT).withDefaultRegion("US");
        List<Progress> progress = new CopyOnWriteArrayList<>();
        try (ContactDiscovery discovery = new ContactDiscovery(server.getUrl(), config)) {
            MatchResult<String> result = discovery
                    .matchAsync(TestData.CONTACTS, Protocol.DH, progress::add)
                    .get(60, TimeUnit.SECONDS);
            assertEquals(Protocol.DH, result.getProtocol());
            assertEquals(TestData.EXPECTED.size(), result.getMatches().size());
            assertEquals(Phase.CREATE_SESSION, progress.get(0).getPhase());
            assertEquals(Phase.LABELS, progress.get(progress.size() - 1).getPhase());

            ServerHealth health = discovery.healthAsync().get(30, TimeUnit.SECONDS);
            assertEquals(TestData.REGISTRY.size(), health.getRegistryItems());
        }
    }

    @Test
    void failuresArriveAsTheCauseOfExecutionException() throws Exception {
        // A port nothing listens on (bound, then closed): the run fails with a network error.
        int closed;
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            closed = s.getLocalPort();
        }
        DiscoveryConfig config = new DiscoveryConfig().withRetries(0).withProtocol(Protocol.DH);
        try (ContactDiscovery discovery = new ContactDiscovery("http://127.0.0.1:" + closed, config)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> discovery.matchAsync(List.of("a@example.com")).get(30, TimeUnit.SECONDS));
            assertInstanceOf(ContactDiscoveryException.Network.class, e.getCause());
        }
        // No valid contact is a result (every row rejected), not a failure.
        try (ContactDiscovery discovery = new ContactDiscovery(server.getUrl(), new DiscoveryConfig())) {
            MatchResult<String> r = discovery.matchAsync(List.of("", "not a contact")).get(30, TimeUnit.SECONDS);
            assertEquals(2, r.getRejected().size());
            assertTrue(r.getMatches().isEmpty());
        }
    }

    @Test
    void theConstructorDeclaresWhatItThrows() throws Exception {
        // A checked exception for Java: the compiler makes callers handle it, and a URL the
        // SDK refuses is reported at construction.
        ContactDiscoveryException e = assertThrows(ContactDiscoveryException.InvalidInput.class,
                () -> new ContactDiscovery("ftp://example.com", new DiscoveryConfig()));
        assertInstanceOf(dev.psisdk.ffi.PsiException.class, e.getCause());
        assertEquals(ContactDiscovery.class.getConstructor(String.class, DiscoveryConfig.class)
                .getExceptionTypes()[0], ContactDiscoveryException.class);
    }

    @Test
    void aFutureCanBeCancelledWhileItsRunIsUnderWay() throws Exception {
        try (ContactDiscovery discovery = new ContactDiscovery(server.getUrl(), new DiscoveryConfig())) {
            CountDownLatch started = new CountDownLatch(1);
            CountDownLatch cancelled = new CountDownLatch(1);
            List<Progress> progress = new CopyOnWriteArrayList<>();
            CompletableFuture<MatchResult<String>> f = discovery.matchAsync(TestData.CONTACTS, Protocol.OT, p -> {
                progress.add(p);
                started.countDown();
                try {
                    // Holds the delivery of progress at the first event until the future is
                    // cancelled (a test device: the native run goes on meanwhile, since
                    // progress is delivered on the SDK's pool, not on the run's thread).
                    cancelled.await(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            assertTrue(started.await(30, TimeUnit.SECONDS), "the run did not start");
            f.cancel(true);
            Thread.sleep(200); // the coroutine releases the native future on its dispatcher
            cancelled.countDown();
            assertThrows(CancellationException.class, () -> f.get(30, TimeUnit.SECONDS));
            // A cancelled future delivers no further progress.
            Thread.sleep(500);
            assertEquals(1, progress.size(), progress.toString());
            // The client is still usable afterwards.
            assertEquals(TestData.EXPECTED.size(),
                    discovery.matchAsync(TestData.CONTACTS).get(60, TimeUnit.SECONDS)
                            .getMatches().size());
        }
    }
}
