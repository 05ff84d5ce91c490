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
    void failuresArriveAsTheCauseOfExecutionException() {
        try (ContactDiscovery discovery = new ContactDiscovery(server.getUrl(), new DiscoveryConfig())) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> discovery.matchAsync(List.of("", "not a contact")).get(30, TimeUnit.SECONDS));
            assertInstanceOf(ContactDiscoveryException.InvalidInput.class, e.getCause());
        }
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
                    // Holds the run at its first phase until the future is cancelled (a test
                    // device: real listeners must not block the run's thread).
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
            // The native run stopped: it never reached the label phase.
            Thread.sleep(500);
            assertTrue(progress.stream().noneMatch(p -> p.getPhase() == Phase.LABELS), progress.toString());
            // The client is still usable afterwards.
            assertEquals(TestData.EXPECTED.size(),
                    discovery.matchAsync(TestData.CONTACTS).get(60, TimeUnit.SECONDS)
                            .getMatches().size());
        }
    }
}
