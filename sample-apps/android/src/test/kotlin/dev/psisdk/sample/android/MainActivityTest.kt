package dev.psisdk.sample.android

import android.Manifest
import android.app.Application
import android.content.pm.PackageManager
import android.os.Looper
import android.view.View
import android.view.ViewGroup
import android.widget.Button
import android.widget.EditText
import android.widget.ListView
import android.widget.TextView
import dev.psisdk.Protocol
import kotlinx.coroutines.Dispatchers
import org.junit.Assert.assertArrayEquals
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Test
import org.junit.runner.RunWith
import org.robolectric.Robolectric
import org.robolectric.RobolectricTestRunner
import org.robolectric.RuntimeEnvironment
import org.robolectric.Shadows.shadowOf
import org.robolectric.annotation.Config

/**
 * [MainActivity] on Robolectric's Android 14: it asks for `READ_CONTACTS`, runs the view
 * model with the typed address, and renders the states. Its view model reads a fixed address
 * book and matches with a [FakeMatcher].
 */
@RunWith(RobolectricTestRunner::class)
@Config(sdk = [34])
class MainActivityTest {
    /** The screen with a fake address book and matcher. */
    class TestActivity : MainActivity() {
        override fun newViewModel() = MatchViewModel(
            ContactSource { ContactsRead.Entries(listOf(ALICE)) },
            matcher,
            Dispatchers.Unconfined,
            Dispatchers.Unconfined,
        )
    }

    private val app: Application get() = RuntimeEnvironment.getApplication()

    private fun start(): TestActivity = Robolectric.buildActivity(TestActivity::class.java).setup().get()

    private fun View.all(): List<View> =
        listOf(this) + if (this is ViewGroup) (0 until childCount).flatMap { getChildAt(it).all() } else emptyList()

    private fun TestActivity.views() = window.decorView.all()

    private fun TestActivity.texts() = views().filterIsInstance<TextView>()
        .filter { it.visibility == View.VISIBLE }.map { it.text.toString() }

    private fun TestActivity.pressMatch() {
        views().filterIsInstance<Button>().single { it.text == "Match" }.performClick()
        shadowOf(Looper.getMainLooper()).idle()
    }

    @Test
    fun matchWithoutThePermissionAsksForItAndARefusalIsShown() {
        matcher = FakeMatcher { error("no run without the permission") }
        shadowOf(app).denyPermissions(Manifest.permission.READ_CONTACTS)
        val activity = start()

        activity.pressMatch()
        val request = shadowOf(activity).lastRequestedPermission
        assertArrayEquals(arrayOf(Manifest.permission.READ_CONTACTS), request.requestedPermissions)

        activity.onRequestPermissionsResult(
            request.requestCode,
            request.requestedPermissions,
            intArrayOf(PackageManager.PERMISSION_DENIED),
        )
        shadowOf(Looper.getMainLooper()).idle()
        assertTrue(activity.texts().toString(), UserMessages.NEEDS_PERMISSION in activity.texts())
        assertTrue(matcher.calls.isEmpty())
    }

    @Test
    fun matchWithThePermissionShowsTheMatchesTheirLabelsAndTheProtocol() {
        matcher = FakeMatcher { MatchOutcome(listOf(Match(ALICE, "+14155550101", "Alice (@alice)")), Protocol.DH, 0) }
        shadowOf(app).grantPermissions(Manifest.permission.READ_CONTACTS)
        val activity = start()
        activity.views().filterIsInstance<EditText>().single().setText("https://psi.example.com")

        activity.pressMatch()

        assertEquals(listOf("https://psi.example.com" to listOf(ALICE)), matcher.calls.toList())
        val texts = activity.texts()
        assertTrue(texts.toString(), "1 of your contacts uses this service (matched with DH-PSI)." in texts)
        assertTrue(texts.toString(), "Protocol: DH-PSI" in texts)
        val list = activity.views().filterIsInstance<ListView>().single()
        assertEquals(1, list.adapter.count)
        assertEquals("Alice Walker — Alice (@alice)\n+1 415 555 0101", list.adapter.getItem(0))
    }

    @Test
    fun theProgressBarFillsWithTheSdksFraction() {
        val gate = kotlinx.coroutines.CompletableDeferred<Unit>()
        matcher = FakeMatcher { onProgress ->
            onProgress(dev.psisdk.Progress(dev.psisdk.Phase.ENCODED_SET, 1, null, 0.5))
            gate.await()
            MatchOutcome(emptyList(), Protocol.DH, 0)
        }
        shadowOf(app).grantPermissions(Manifest.permission.READ_CONTACTS)
        val activity = start()

        activity.pressMatch()

        val bar = activity.views().filterIsInstance<android.widget.ProgressBar>().single()
        assertEquals(View.VISIBLE, bar.visibility)
        assertEquals(false, bar.isIndeterminate)
        assertEquals(50, bar.progress)
        gate.complete(Unit)
        shadowOf(Looper.getMainLooper()).idle()
        assertEquals(View.GONE, bar.visibility)
    }

    companion object {
        val ALICE = Contact("Alice Walker", "+1 415 555 0101", Contact.Kind.PHONE)

        /** The matcher of the next [TestActivity]. */
        lateinit var matcher: FakeMatcher
    }
}
