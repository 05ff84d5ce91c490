package dev.psisdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
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
    void aFutureCanBeCancelled() throws Exception {
        try (ContactDiscovery discovery = new ContactDiscovery(server.getUrl(), new DiscoveryConfig())) {
            CompletableFuture<MatchResult<String>> f =
                    discovery.matchAsync(TestData.CONTACTS, Protocol.OT, null);
            f.cancel(true);
            assertTrue(f.isCancelled());
            assertThrows(CancellationException.class, () -> f.get(30, TimeUnit.SECONDS));
            // The client is still usable afterwards.
            assertEquals(TestData.EXPECTED.size(),
                    discovery.matchAsync(TestData.CONTACTS).get(60, TimeUnit.SECONDS)
                            .getMatches().size());
        }
    }
}
