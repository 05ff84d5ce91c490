// The Android sample app, with the SDK's Android library (../../android) as an included
// build. Not built on the project's CI machines (no Android SDK, NDK or Google Maven there):
// see README.md for what is checked instead.
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
rootProject.name = "psi-android-sample"

includeBuild("../../android") {
    dependencySubstitution {
        substitute(module("dev.psisdk:psi-sdk-android")).using(project(":"))
    }
}
