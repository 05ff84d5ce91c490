package dev.psisdk.sample.android

import android.Manifest
import android.app.Activity
import android.content.pm.PackageManager
import android.graphics.Color
import android.os.Bundle
import android.text.InputType
import android.view.View
import android.view.ViewGroup.LayoutParams.MATCH_PARENT
import android.view.ViewGroup.LayoutParams.WRAP_CONTENT
import android.widget.ArrayAdapter
import android.widget.Button
import android.widget.EditText
import android.widget.LinearLayout
import android.widget.ListView
import android.widget.ProgressBar
import android.widget.TextView
import dev.psisdk.android.AndroidDiscovery
import kotlinx.coroutines.MainScope
import kotlinx.coroutines.cancel
import kotlinx.coroutines.launch

/**
 * The sample's one screen, built in code (no layout resources): the server address, a Match
 * button, the status line (progress, outcome or error), the protocol that ran, and the
 * matched contacts with their labels.
 *
 * The Activity asks for `READ_CONTACTS` when Match is pressed without it, and renders
 * [MatchViewModel.state]; everything else is in the view model. The view model (and so the
 * SDK client and a run in progress) survives configuration changes through
 * [onRetainNonConfigurationInstance]; an app using AndroidX would hold it in an
 * `androidx.lifecycle.ViewModel` and collect in `lifecycleScope`.
 *
 * Intent extras for development (`adb shell am start -n ... -e server URL -e token TOKEN`):
 * [EXTRA_SERVER] the server address (default [DEFAULT_SERVER]), [EXTRA_TOKEN] its bearer token.
 */
open class MainActivity : Activity() {
    private val ui = MainScope()
    private lateinit var viewModel: MatchViewModel
    private lateinit var serverUrl: EditText
    private lateinit var matchButton: Button
    private lateinit var progress: ProgressBar
    private lateinit var status: TextView
    private lateinit var protocol: TextView
    private lateinit var matches: ArrayAdapter<String>

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        viewModel = lastNonConfigurationInstance as? MatchViewModel ?: newViewModel()
        setContentView(buildViews())
        ui.launch { viewModel.state.collect { render(it) } }
    }

    /**
     * The view model of a new screen: the device's contacts and the SDK, with the device's
     * region for phone numbers written without a country code and the token of the
     * launching intent. Tests override it.
     */
    protected open fun newViewModel(): MatchViewModel {
        val config = AndroidDiscovery.defaultConfig(this).withToken(intent?.getStringExtra(EXTRA_TOKEN))
        return MatchViewModel(DeviceContacts(contentResolver), SdkMatcher.forAndroid(this, config))
    }

    override fun onRetainNonConfigurationInstance(): Any = viewModel

    override fun onDestroy() {
        ui.cancel()
        if (!isChangingConfigurations) viewModel.close()
        super.onDestroy()
    }

    override fun onRequestPermissionsResult(requestCode: Int, permissions: Array<out String>, grantResults: IntArray) {
        super.onRequestPermissionsResult(requestCode, permissions, grantResults)
        if (requestCode != REQUEST_READ_CONTACTS) return
        if (grantResults.firstOrNull() == PackageManager.PERMISSION_GRANTED) {
            viewModel.match(serverUrl.text.toString())
        } else {
            viewModel.permissionDenied()
        }
    }

    private fun onMatchPressed() {
        if (checkSelfPermission(Manifest.permission.READ_CONTACTS) == PackageManager.PERMISSION_GRANTED) {
            viewModel.match(serverUrl.text.toString())
        } else {
            requestPermissions(arrayOf(Manifest.permission.READ_CONTACTS), REQUEST_READ_CONTACTS)
        }
    }

    private fun render(state: UiState) {
        matchButton.isEnabled = state.canMatch
        progress.visibility = if (state.canMatch) View.GONE else View.VISIBLE
        // A bar that fills with the SDK's fraction (the requests answered over those the
        // run will make), indeterminate until the session is open and while reading.
        val fraction = ((state as? UiState.Matching)?.progress?.fraction ?: 0.0)
        progress.isIndeterminate = fraction <= 0.0
        progress.progress = (fraction * 100).toInt()
        status.text = state.message
        status.setTextColor(if (state is UiState.Failed || state is UiState.NeedsPermission) Color.RED else Color.DKGRAY)
        matches.clear()
        if (state is UiState.Done) {
            protocol.text = "Protocol: ${UserMessages.protocolName(state.protocol)}"
            protocol.visibility = View.VISIBLE
            matches.addAll(state.matches.map(UserMessages::matchLine))
        } else {
            protocol.visibility = View.GONE
        }
    }

    private fun buildViews(): View {
        val pad = (16 * resources.displayMetrics.density).toInt()
        serverUrl = EditText(this).apply {
            id = ID_SERVER // a fixed id: the typed address survives recreation
            hint = "https://discovery.example.com"
            inputType = InputType.TYPE_CLASS_TEXT or InputType.TYPE_TEXT_VARIATION_URI
            setSingleLine(true)
            setText(intent?.getStringExtra(EXTRA_SERVER) ?: DEFAULT_SERVER)
        }
        matchButton = Button(this).apply {
            text = "Match"
            setOnClickListener { onMatchPressed() }
        }
        progress = ProgressBar(this, null, android.R.attr.progressBarStyleHorizontal).apply {
            isIndeterminate = true
            max = 100
        }
        status = TextView(this).apply { textSize = 16f }
        protocol = TextView(this)
        matches = ArrayAdapter(this, android.R.layout.simple_list_item_1, mutableListOf<String>())
        val list = ListView(this).apply { adapter = matches }
        return LinearLayout(this).apply {
            orientation = LinearLayout.VERTICAL
            setPadding(pad, pad, pad, pad)
            addView(TextView(this@MainActivity).apply { text = "Server" })
            addView(serverUrl, LinearLayout.LayoutParams(MATCH_PARENT, WRAP_CONTENT))
            addView(matchButton, LinearLayout.LayoutParams(WRAP_CONTENT, WRAP_CONTENT))
            addView(progress, LinearLayout.LayoutParams(MATCH_PARENT, WRAP_CONTENT))
            addView(status, LinearLayout.LayoutParams(MATCH_PARENT, WRAP_CONTENT))
            addView(protocol, LinearLayout.LayoutParams(MATCH_PARENT, WRAP_CONTENT))
            addView(list, LinearLayout.LayoutParams(MATCH_PARENT, 0, 1f))
        }
    }

    companion object {
        /** Intent extra: the server's address. */
        const val EXTRA_SERVER = "server"

        /** Intent extra: the server's bearer token. */
        const val EXTRA_TOKEN = "token"

        /**
         * `psi serve` on the development machine, reached through `adb reverse tcp:8080
         * tcp:8080` (loopback, so the SDK allows plain HTTP; see the network security config).
         */
        const val DEFAULT_SERVER = "http://127.0.0.1:8080"

        internal const val REQUEST_READ_CONTACTS = 1
        private const val ID_SERVER = 0x7f0b0001
    }
}
