// The Android library of the PSI SDK. Not built on the project's CI machines (no Android
// SDK, NDK or Google Maven there): see README.md for what is checked instead.
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}
dependencyResolutionManagement {
    repositories {
        google()
        mavenCentral()
    }
}
rootProject.name = "psi-sdk-android"
